//go:build linux && !nonetns

package goswitch

import (
	"errors"
	"fmt"
	"net"
	"unsafe"

	"golang.org/x/sys/unix"
)

// PortIO moves batches of whole Ethernet frames through one switch port.
// The Go switch uses AF_PACKET sockets (Open); tests use fakes.
type PortIO interface {
	// Recv fills bufs[i][:lens[i]] with up to len(bufs) received frames
	// without blocking and returns how many it filled (0 when none is
	// waiting). A frame longer than its buffer is reported with its real
	// length, larger than len(bufs[i]), and is truncated.
	Recv(bufs [][]byte, lens []int) (int, error)
	// Send transmits frames, in order, without blocking. It returns how
	// many it sent; fewer than len(frames) with a nil error means the
	// socket is full and the rest should be retried when FD is writable.
	Send(frames [][]byte) (int, error)
	// FD is a descriptor to poll for readability and writability, or -1.
	FD() int
	Close() error
}

// packetSocket is an AF_PACKET raw socket bound to one interface, read with
// recvmmsg and written with sendmmsg: one system call per batch. Both calls
// never block (MSG_DONTWAIT), so they are made as raw system calls that keep
// the goroutine's P: a batch of sends can take long enough (the receivers'
// kernel stacks run in it) for the Go scheduler to hand the P away, and
// getting one back would stall the data plane. Measured: about +15% of
// forwarding rate on a loaded 2-core machine.
type packetSocket struct {
	fd int
	// Scratch for the batched calls, sized to the largest batch.
	msgs []unix.Mmsghdr
	iovs []unix.Iovec
}

// SocketBuffer is the receive and send buffer of each port socket: a burst
// of a few thousand frames fits before the kernel drops.
const SocketBuffer = 8 << 20

// OpenAFPacket opens an AF_PACKET socket on the interface named iface in the
// calling thread's network namespace. It receives every frame arriving on
// the interface (promiscuous, not the frames it sends itself).
func OpenAFPacket(iface string, batch int) (PortIO, error) {
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return nil, fmt.Errorf("port %s: %w", iface, err)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
	if err != nil {
		return nil, fmt.Errorf("port %s: AF_PACKET socket: %w", iface, err)
	}
	s := &packetSocket{fd: fd, msgs: make([]unix.Mmsghdr, batch), iovs: make([]unix.Iovec, batch)}
	fail := func(what string, err error) (PortIO, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("port %s: %s: %w", iface, what, err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, SocketBuffer); err != nil {
		return fail("SO_RCVBUFFORCE", err)
	}
	if what, err := bindPort(fd, ifi.Index); err != nil {
		return fail(what, err)
	}
	// Frames that arrived before the bind (on any interface) are dropped.
	buf := make([]byte, 2048)
	for {
		if _, _, err := unix.Recvfrom(fd, buf, unix.MSG_DONTWAIT); err != nil {
			break
		}
	}
	return s, nil
}

// bindPort makes the AF_PACKET socket fd a switch port's on interface
// ifindex: it receives every frame arriving there (promiscuous), not the
// ones it sends, and sends with a buffer of SocketBuffer. Frames go
// through the device's qdisc (noqueue on a veth), not PACKET_QDISC_BYPASS:
// bypassing would hide them from captures (tshark, 'tracebed topo
// capture') on the port. On error it says which step failed.
func bindPort(fd, ifindex int) (string, error) {
	// Our own transmissions would otherwise come back on this socket.
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1); err != nil {
		return "PACKET_IGNORE_OUTGOING", err
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, SocketBuffer); err != nil {
		return "SO_SNDBUFFORCE", err
	}
	mreq := unix.PacketMreq{Ifindex: int32(ifindex), Type: unix.PACKET_MR_PROMISC}
	if err := unix.SetsockoptPacketMreq(fd, unix.SOL_PACKET, unix.PACKET_ADD_MEMBERSHIP, &mreq); err != nil {
		return "promiscuous mode", err
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifindex}); err != nil {
		return "bind", err
	}
	return "", nil
}

// packetSocketOn looks up the interface named iface and opens a raw
// AF_PACKET socket with protocol 0: it receives nothing until bound with
// a protocol.
func packetSocketOn(iface string) (*net.Interface, int, error) {
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return nil, -1, fmt.Errorf("port %s: %w", iface, err)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, -1, fmt.Errorf("port %s: AF_PACKET socket: %w", iface, err)
	}
	return ifi, fd, nil
}

// openPacketTx opens an AF_PACKET socket on iface that only sends: bound
// with protocol 0, it receives nothing, and the kernel does not copy the
// interface's frames to it. Its frames pass the device's qdisc and packet
// taps as the stack's own do.
func openPacketTx(iface string, batch int) (*packetSocket, error) {
	ifi, fd, err := packetSocketOn(iface)
	if err != nil {
		return nil, err
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, SocketBuffer); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("port %s: SO_SNDBUFFORCE: %w", iface, err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: 0, Ifindex: ifi.Index}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("port %s: bind: %w", iface, err)
	}
	return &packetSocket{fd: fd, msgs: make([]unix.Mmsghdr, batch), iovs: make([]unix.Iovec, batch)}, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func (s *packetSocket) FD() int { return s.fd }

func (s *packetSocket) Close() error { return unix.Close(s.fd) }

func (s *packetSocket) Recv(bufs [][]byte, lens []int) (int, error) {
	n := min(len(bufs), len(s.msgs))
	if n == 0 {
		return 0, nil
	}
	for i := range n {
		s.iovs[i] = unix.Iovec{Base: &bufs[i][0]}
		s.iovs[i].SetLen(len(bufs[i]))
		s.msgs[i] = unix.Mmsghdr{}
		s.msgs[i].Hdr.Iov = &s.iovs[i]
		s.msgs[i].Hdr.SetIovlen(1)
	}
	// MSG_TRUNC makes the kernel report a frame's real length.
	r, _, errno := unix.RawSyscall6(unix.SYS_RECVMMSG, uintptr(s.fd), uintptr(unsafe.Pointer(&s.msgs[0])), uintptr(n),
		unix.MSG_DONTWAIT|unix.MSG_TRUNC, 0, 0)
	if errno != 0 {
		if errno == unix.EAGAIN || errno == unix.EINTR {
			return 0, nil
		}
		return 0, fmt.Errorf("recvmmsg: %w", errno)
	}
	for i := range int(r) {
		lens[i] = int(s.msgs[i].Len)
	}
	return int(r), nil
}

func (s *packetSocket) Send(frames [][]byte) (int, error) {
	sent := 0
	for sent < len(frames) {
		n := min(len(frames)-sent, len(s.msgs))
		for i := range n {
			f := frames[sent+i]
			s.iovs[i] = unix.Iovec{Base: &f[0]}
			s.iovs[i].SetLen(len(f))
			s.msgs[i] = unix.Mmsghdr{}
			s.msgs[i].Hdr.Iov = &s.iovs[i]
			s.msgs[i].Hdr.SetIovlen(1)
		}
		r, _, errno := unix.RawSyscall6(unix.SYS_SENDMMSG, uintptr(s.fd), uintptr(unsafe.Pointer(&s.msgs[0])), uintptr(n),
			unix.MSG_DONTWAIT, 0, 0)
		switch {
		case errno == unix.EAGAIN || errno == unix.ENOBUFS:
			return sent, nil
		case errno == unix.EINTR:
			continue
		case errno != 0:
			// The first frame of the batch was refused (e.g. larger
			// than the MTU): report it so the caller drops it.
			return sent, &SendError{Err: errno}
		}
		sent += int(r)
		if int(r) < n {
			return sent, nil
		}
	}
	return sent, nil
}

// KernelDrops returns how many frames the kernel dropped since the last
// call because the socket's receive buffer was full (the switch fell
// behind), from PACKET_STATISTICS.
func (s *packetSocket) KernelDrops() uint64 {
	st, err := unix.GetsockoptTpacketStats(s.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS)
	if err != nil {
		return 0 // not an AF_PACKET socket (tests)
	}
	return uint64(st.Drops)
}

// kernelDropper is a PortIO that can tell frames the kernel dropped.
type kernelDropper interface{ KernelDrops() uint64 }

// SendError reports a frame the kernel refused to send; Send returns it
// with the index of that frame as its count.
type SendError struct{ Err error }

func (e *SendError) Error() string { return "sendmmsg: " + e.Err.Error() }
func (e *SendError) Unwrap() error { return e.Err }

// IsSendError reports whether err refused a single frame.
func IsSendError(err error) bool {
	var se *SendError
	return errors.As(err, &se)
}

// NewSocketIO wraps a datagram socket (an AF_PACKET socket, or one end of
// a socketpair in tests) as a PortIO; the PortIO owns fd.
func NewSocketIO(fd, batch int) PortIO {
	return &packetSocket{fd: fd, msgs: make([]unix.Mmsghdr, batch), iovs: make([]unix.Iovec, batch)}
}
