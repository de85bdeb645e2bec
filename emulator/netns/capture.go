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
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/tracebed/tracebed/topologies"
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
//
// A Go switch receiving through AF_XDP takes the frames arriving on its
// interfaces before any packet tap sees them (an XDP program is attached
// there). On such an interface Capture records the frames the interface
// sends, and as inbound the frames the other end of the link sends: every
// sender on a link passes the taps of its own interface (hosts' stacks, Go
// switches' AF_PACKET send sockets, bmv2), so nothing on the wire is missed.
func (n *Network) Capture(ctx context.Context, node, iface string, w io.Writer, opts CaptureOptions) (int, error) {
	if opts.Snaplen <= 0 {
		opts.Snaplen = 65535
	}
	type end struct {
		fd      int
		inbound bool // its outgoing frames are the capture's inbound ones
	}
	var ends []end
	defer func() {
		for _, e := range ends {
			unix.Close(e.fd)
		}
	}()
	fd, xdp, err := n.captureSocket(node, iface)
	if err != nil {
		return 0, fmt.Errorf("capture %s:%s: %w", node, iface, err)
	}
	ends = append(ends, end{fd: fd})
	if xdp {
		peer := n.peerOf(node, iface)
		if peer == nil {
			return 0, fmt.Errorf("capture %s:%s: an XDP program takes the interface's incoming frames, and the topology has no such link to capture them at its other end", node, iface)
		}
		fd, _, err := n.captureSocket(peer.Node.Name, peer.Iface)
		if err != nil {
			return 0, fmt.Errorf("capture %s:%s (the incoming frames, at %s): %w", node, iface, peer, err)
		}
		ends = append(ends, end{fd: fd, inbound: true})
	}
	if opts.Started != nil {
		opts.Started()
	}
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
	fds := make([]unix.PollFd, len(ends))
	for i, e := range ends {
		fds[i] = unix.PollFd{Fd: int32(e.fd), Events: unix.POLLIN}
	}
	buf := make([]byte, opts.Snaplen)
	count := 0
	draining := false
	for (opts.Count <= 0 || count < opts.Count) && (deadline.IsZero() || time.Now().Before(deadline)) {
		if ctx.Err() != nil {
			if draining {
				break
			}
			// Frames already queued when ctx ended are recorded.
			draining = true
			for i := range fds {
				fds[i].Revents = unix.POLLIN
			}
		} else if _, err := unix.Poll(fds, 100); err != nil && err != unix.EINTR {
			// (Waking up regularly to notice ctx and the limits.)
			return count, fmt.Errorf("capture %s:%s: %w", node, iface, err)
		}
		for i, e := range ends {
			if fds[i].Revents == 0 {
				continue
			}
			k, from, err := unix.Recvfrom(e.fd, buf, unix.MSG_TRUNC|unix.MSG_DONTWAIT)
			now := time.Now()
			if err != nil {
				if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
					fds[i].Revents = 0
					continue
				}
				return count, fmt.Errorf("capture %s:%s: %w", node, iface, err)
			}
			if draining {
				draining = false // another pass after this frame
			}
			outgoing := false
			if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
				outgoing = true
			}
			dir := pcapgo.NgEpbFlagDirectionInbound
			switch {
			case len(ends) > 1 && !outgoing:
				continue // at either end, the incoming frames are the other end's outgoing ones
			case outgoing && !e.inbound:
				dir = pcapgo.NgEpbFlagDirectionOutbound
			}
			ci := gopacket.CaptureInfo{Timestamp: now, CaptureLength: min(k, len(buf)), Length: k}
			if err := pw.WritePacketWithOptions(ci, buf[:ci.CaptureLength], pcapgo.NgPacketOptions{Flags: &pcapgo.NgEpbFlags{Direction: dir}}); err != nil {
				return count, err
			}
			if count++; opts.Count > 0 && count >= opts.Count {
				break
			}
		}
	}
	return count, pw.Flush()
}

// captureSocket opens a packet socket seeing every frame of iface in
// node's namespace, and reports whether an XDP program is attached to the
// interface (its incoming frames then never reach the socket).
func (n *Network) captureSocket(node, iface string) (fd int, xdp bool, err error) {
	err = n.Do(node, func() error {
		ifi, err := net.InterfaceByName(iface)
		if err != nil {
			return err
		}
		if l, err := netlink.LinkByIndex(ifi.Index); err == nil && l.Attrs().Xdp != nil {
			xdp = l.Attrs().Xdp.Attached
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
	return fd, xdp, err
}

// peerOf returns the other end of the link on iface of node, or nil.
func (n *Network) peerOf(node, iface string) *topologies.Port {
	nd := n.Topology.Node(node)
	if nd == nil {
		return nil
	}
	for _, p := range nd.Ports {
		if p.Iface == iface && p.Peer != nil {
			return p.Peer
		}
	}
	return nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
