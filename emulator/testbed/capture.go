package testbed

import (
	"fmt"
	"io"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/tracebed/tracebed/emulator/sim"
)

// Capturer is implemented by testbeds that can record the frames crossing
// a port, as tcpdump on an interface would: the sim testbed and the netns
// one.
type Capturer interface {
	// Capture writes every frame sent or received on port num (1-based,
	// as in the topology) of the named node to w as pcapng, each marked
	// inbound or outbound, until stop is called; stop flushes and
	// returns the first error.
	Capture(node string, num int, w io.Writer) (stop func() error, err error)
}

// Capture implements Capturer. Both directions are recorded where their
// frames start transmission: an outbound frame on this port, an inbound
// one on the port at the other end of the link — so a frame the link
// then loses is in the capture, as on a tap at its sender. Timestamps are
// the virtual time since the start of the run (from the Unix epoch).
func (t *Sim) Capture(node string, num int, w io.Writer) (func() error, error) {
	n := t.Topology().Node(node)
	if n == nil || num < 1 || num > len(n.Ports) {
		return nil, fmt.Errorf("capture: no port %s:%d", node, num)
	}
	if t.taps == nil {
		t.taps = map[portKey]bool{}
	}
	port := n.Ports[num-1]
	peer := port.Peer
	here, there := portKey{node, num}, portKey{peer.Node.Name, peer.Num}
	for _, p := range []portKey{here, there} {
		if t.taps[p] {
			return nil, fmt.Errorf("capture: %s:%d is already captured", p.node, p.num)
		}
	}
	pw, err := pcapgo.NewNgWriterInterface(w, pcapgo.NgInterface{
		Name: fmt.Sprintf("%s:%d", node, num), Description: fmt.Sprintf("tracebed sim, node %s, port %d (%s)", node, num, port.Iface),
		LinkType: layers.LinkTypeEthernet, SnapLength: 65535, TimestampResolution: 9,
	}, pcapgo.NgWriterOptions{SectionInfo: pcapgo.NgSectionInfo{Application: "tracebed (sim)"}})
	if err != nil {
		return nil, err
	}
	var werr error
	record := func(dir pcapgo.NgEpbFlag) func(sim.Time, []byte) {
		flags := &pcapgo.NgEpbFlags{Direction: dir}
		return func(at sim.Time, f []byte) {
			if werr != nil {
				return
			}
			ci := gopacket.CaptureInfo{Timestamp: time.Unix(0, 0).Add(at.Duration()).UTC(), CaptureLength: len(f), Length: len(f)}
			werr = pw.WritePacketWithOptions(ci, f, pcapgo.NgPacketOptions{Flags: flags})
		}
	}
	if err := t.Network.Tap(node, num, record(pcapgo.NgEpbFlagDirectionOutbound)); err != nil {
		return nil, err
	}
	if err := t.Network.Tap(peer.Node.Name, peer.Num, record(pcapgo.NgEpbFlagDirectionInbound)); err != nil {
		return nil, err
	}
	t.taps[here], t.taps[there] = true, true
	return func() error {
		t.Network.Tap(node, num, nil)
		t.Network.Tap(peer.Node.Name, peer.Num, nil)
		delete(t.taps, here)
		delete(t.taps, there)
		if werr != nil {
			return werr
		}
		return pw.Flush()
	}, nil
}

// portKey names a port of a node.
type portKey struct {
	node string
	num  int
}

var _ Capturer = (*Sim)(nil)
