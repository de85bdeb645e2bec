//go:build linux && !nonetns

package netns

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"golang.org/x/sys/unix"
)

// CaptureOptions limit a capture; zero values mean no limit.
type CaptureOptions struct {
	Count    int           // stop after this many frames
	Duration time.Duration // stop after this long
	Snaplen  int           // bytes kept per frame (default 65535)
	// Started, if set, is called once the capture socket is open: frames
	// from then on are captured.
	Started func()
}

// Capture records every frame received and sent on interface iface of node
// as pcapng (gopacket/pcapgo; Wireshark and tshark read it), each frame
// marked inbound or outbound, until ctx ends or a limit of opts is reached.
// It returns the number of frames written.
func (n *Network) Capture(ctx context.Context, node, iface string, w io.Writer, opts CaptureOptions) (int, error) {
	if opts.Snaplen <= 0 {
		opts.Snaplen = 65535
	}
	var fd int
	err := n.Do(node, func() error {
		ifi, err := net.InterfaceByName(iface)
		if err != nil {
			return err
		}
		proto := htons(unix.ETH_P_ALL)
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(proto))
		if err != nil {
			return err
		}
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: ifi.Index}); err != nil {
			unix.Close(fd)
			return err
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("capture %s:%s: %w", node, iface, err)
	}
	defer unix.Close(fd)
	if opts.Started != nil {
		opts.Started()
	}
	// Wake up regularly to notice ctx and the limits.
	tv := unix.NsecToTimeval(int64(100 * time.Millisecond))
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	pw, err := pcapgo.NewNgWriterInterface(w, pcapgo.NgInterface{
		Name: node + ":" + iface, Description: fmt.Sprintf("tracebed run %s, node %s, interface %s", n.RunID, node, iface),
		LinkType: layers.LinkTypeEthernet, SnapLength: uint32(opts.Snaplen), TimestampResolution: 9,
	}, pcapgo.NgWriterOptions{SectionInfo: pcapgo.NgSectionInfo{Application: "tracebed topo capture"}})
	if err != nil {
		return 0, err
	}
	var deadline time.Time
	if opts.Duration > 0 {
		deadline = time.Now().Add(opts.Duration)
	}
	buf := make([]byte, opts.Snaplen)
	count := 0
	for ctx.Err() == nil && (opts.Count <= 0 || count < opts.Count) && (deadline.IsZero() || time.Now().Before(deadline)) {
		k, from, err := unix.Recvfrom(fd, buf, unix.MSG_TRUNC)
		now := time.Now()
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				continue
			}
			return count, fmt.Errorf("capture %s:%s: %w", node, iface, err)
		}
		dir := pcapgo.NgEpbFlagDirectionInbound
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			dir = pcapgo.NgEpbFlagDirectionOutbound
		}
		ci := gopacket.CaptureInfo{Timestamp: now, CaptureLength: min(k, len(buf)), Length: k}
		if err := pw.WritePacketWithOptions(ci, buf[:ci.CaptureLength], pcapgo.NgPacketOptions{Flags: &pcapgo.NgEpbFlags{Direction: dir}}); err != nil {
			return count, err
		}
		count++
	}
	return count, pw.Flush()
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
