//go:build linux && !nonetns

package goswitch

import (
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/safchain/ethtool"
	"golang.org/x/sys/unix"
)

// xskSocket is a port that receives through an AF_XDP socket on queue 0
// of its interface and sends through an AF_PACKET socket.
//
// An XDP program attached to the interface (driver mode) redirects every
// frame arriving there into the AF_XDP socket, before the kernel builds a
// socket buffer for the namespace's stack and before packet taps see it.
// The kernel copies the frame into a chunk of a memory area shared with the
// switch (the UMEM; a veth has no zero-copy AF_XDP) that the switch handed
// it on the fill ring, and posts (chunk, length) on the RX ring: Recv reads
// the ring without a system call. Frames longer than a chunk span several
// (multi-buffer AF_XDP).
//
// Frames are sent with sendmmsg on an AF_PACKET socket that receives
// nothing, as AF_PACKET ports send: through the device's qdisc and packet
// taps, so that a capture sees every frame on the wire, at the end of the
// link that sent it (netns.Network.Capture reads a switch port's incoming
// frames at the other end). The AF_XDP TX ring would send no faster on a
// veth (the kernel builds a socket buffer for every frame in both cases) and
// would hide the switch's frames from captures.
//
// Recv copies frames out of their chunks into the switch's own buffers, so
// the PortIO contract is the AF_PACKET socket's: the pipelines, queues and
// delay lines never hold a chunk.
//
// No library of the Go module proxy implements the socket side of AF_XDP
// (cilium/ebpf loads the program and the XSKMAP; the socket follows the
// kernel's Documentation/networking/af_xdp.rst with golang.org/x/sys).
type xskSocket struct {
	*packetSocket // sends

	fd    int
	iface string
	umem  []byte

	fill, rx, comp xskRing   // the completion ring is required, and unused
	rxFree         []uint64  // receive chunks not in the kernel's hands, a stack
	fillTarget     int       // chunks to keep on the fill ring (see refill)
	grown          time.Time // when fillTarget last changed

	prog  *ebpf.Program
	xsks  *ebpf.Map
	link  link.Link
	drops uint64 // kernel drops already reported
}

// xskRing is one of the socket's rings: a producer and a consumer index
// shared with the kernel, and the entries (uint64 chunk addresses in the
// fill and completion rings, unix.XDPDesc in the RX ring).
type xskRing struct {
	mem        []byte
	prod, cons *uint32
	desc       unsafe.Pointer
	mask       uint32
	cached     uint32 // our side's index (the producer or the consumer)
}

func (r *xskRing) addr(i uint32) *uint64 {
	return (*uint64)(unsafe.Add(r.desc, uintptr(i&r.mask)*8))
}

func (r *xskRing) xdesc(i uint32) *unix.XDPDesc {
	return (*unix.XDPDesc)(unsafe.Add(r.desc, uintptr(i&r.mask)*unsafe.Sizeof(unix.XDPDesc{})))
}

// The AF_XDP socket's geometry: xskChunks receive chunks of xskChunk bytes
// (the fill and RX rings have as many entries), 8 MiB as an AF_PACKET
// port's receive buffer (SocketBuffer): a few thousand frames wait while
// the switch's thread is not running.
const (
	xskChunks     = 4096
	xskChunk      = 2048
	xskCompletion = 64
)

// The fill ring's target (see refill): at least xskFillMin chunks, a few
// batches; halved after xskFillCalm without growth.
const (
	xskFillMin  = 512
	xskFillCalm = 2 * time.Second
)

// OpenXDP opens a port on the interface named iface in the calling
// thread's network namespace that receives through AF_XDP (see xskSocket)
// and sends through AF_PACKET. Closing the port detaches the XDP program
// (it is attached through a BPF link, which also goes away if the process
// dies). maxFrame is the longest frame the interface must carry: longer
// than a chunk needs multi-buffer AF_XDP (Linux 6.6). It fails on
// interfaces or kernels without native XDP, without the privileges to load
// BPF programs, with an XDP program already attached, or with an MTU the
// kernel's XDP cannot take (see IOMode).
func OpenXDP(iface string, maxFrame int) (PortIO, error) {
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return nil, fmt.Errorf("port %s: %w", iface, err)
	}
	// Frames arriving on another receive queue would miss the socket
	// (bound to queue 0) and go to the namespace's stack.
	if q, err := rxQueues(iface); err == nil && q > 1 {
		return nil, fmt.Errorf("port %s: AF_XDP: %d receive queues, the switch binds one", iface, q)
	}
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("port %s: AF_XDP socket: %w", iface, err)
	}
	x := &xskSocket{fd: fd, iface: iface}
	fail := func(what string, err error) (PortIO, error) {
		x.Close()
		return nil, fmt.Errorf("port %s: AF_XDP: %s: %w", iface, what, err)
	}
	x.umem, err = unix.Mmap(-1, 0, xskChunks*xskChunk, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return fail("UMEM", err)
	}
	reg := unix.XDPUmemReg{Addr: uint64(uintptr(unsafe.Pointer(&x.umem[0]))), Len: uint64(len(x.umem)), Size: xskChunk}
	if err := setsockopt(fd, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg)); err != nil {
		return fail("XDP_UMEM_REG", err)
	}
	for _, r := range []struct{ opt, n int }{
		{unix.XDP_UMEM_FILL_RING, xskChunks}, {unix.XDP_RX_RING, xskChunks}, {unix.XDP_UMEM_COMPLETION_RING, xskCompletion},
	} {
		if err := unix.SetsockoptInt(fd, unix.SOL_XDP, r.opt, r.n); err != nil {
			return fail("ring size", err)
		}
	}
	var off unix.XDPMmapOffsets
	if err := getsockopt(fd, unix.XDP_MMAP_OFFSETS, unsafe.Pointer(&off), unsafe.Sizeof(off)); err != nil {
		return fail("XDP_MMAP_OFFSETS", err)
	}
	for _, m := range []struct {
		r    *xskRing
		o    unix.XDPRingOffset
		pgof int64
		n    int
		size uintptr
	}{
		{&x.fill, off.Fr, unix.XDP_UMEM_PGOFF_FILL_RING, xskChunks, 8},
		{&x.rx, off.Rx, unix.XDP_PGOFF_RX_RING, xskChunks, unsafe.Sizeof(unix.XDPDesc{})},
		{&x.comp, off.Cr, unix.XDP_UMEM_PGOFF_COMPLETION_RING, xskCompletion, 8},
	} {
		mem, err := unix.Mmap(fd, m.pgof, int(m.o.Desc)+m.n*int(m.size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
		if err != nil {
			return fail("ring mmap", err)
		}
		*m.r = xskRing{
			mem:  mem,
			prod: (*uint32)(unsafe.Pointer(&mem[m.o.Producer])),
			cons: (*uint32)(unsafe.Pointer(&mem[m.o.Consumer])),
			desc: unsafe.Pointer(&mem[m.o.Desc]),
			mask: uint32(m.n - 1),
		}
	}
	// Every chunk starts free, the first ones on top of the stack.
	for i := range uint64(xskChunks) {
		x.rxFree = append(x.rxFree, (xskChunks-1-i)*xskChunk)
	}
	x.fillTarget, x.grown = 2*xskFillMin, time.Now()
	x.refill()
	// Copy mode: a veth has no zero-copy AF_XDP. A socket closed just
	// before (a switch restarted on the same ports) holds the queue until
	// the kernel has freed it, after an RCU grace period: EBUSY meanwhile.
	sa := &unix.SockaddrXDP{Flags: unix.XDP_COPY, Ifindex: uint32(ifi.Index)}
	var progFlags uint32
	if maxFrame > xskChunk {
		sa.Flags |= unix.XDP_USE_SG
		progFlags = unix.BPF_F_XDP_HAS_FRAGS
	}
	for wait := time.Millisecond; ; wait *= 2 {
		err := unix.Bind(fd, sa)
		if err == nil {
			break
		}
		if err != unix.EBUSY || wait > time.Second {
			return fail("bind", err)
		}
		time.Sleep(wait)
	}
	x.xsks, err = ebpf.NewMap(&ebpf.MapSpec{Name: "tracebed_xsks", Type: ebpf.XSKMap, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		return fail("XSKMAP", err)
	}
	if err := x.xsks.Put(uint32(0), uint32(fd)); err != nil {
		return fail("XSKMAP", err)
	}
	x.prog, err = ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:    "tracebed_xsk",
		Type:    ebpf.XDP,
		Flags:   progFlags,
		License: "Dual MIT/GPL",
		Instructions: asm.Instructions{
			// return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS)
			asm.LoadMem(asm.R2, asm.R1, 16, asm.Word), // struct xdp_md: rx_queue_index
			asm.LoadMapPtr(asm.R1, x.xsks.FD()),
			asm.Mov.Imm(asm.R3, xdpPass), // no socket for the queue: the stack
			asm.FnRedirectMap.Call(),
			asm.Return(),
		},
	})
	if err != nil {
		return fail("XDP program", err)
	}
	if x.packetSocket, err = openPacketTx(iface, Batch); err != nil {
		return fail("send socket", err)
	}
	x.link, err = link.AttachXDP(link.XDPOptions{Program: x.prog, Interface: ifi.Index, Flags: link.XDPDriverMode})
	if err != nil {
		return fail("attach XDP", err)
	}
	return x, nil
}

// rxQueues returns the number of receive queues iface uses (ethtool's
// channels), in the calling thread's namespace.
func rxQueues(iface string) (int, error) {
	e, err := ethtool.NewEthtool()
	if err != nil {
		return 0, err
	}
	defer e.Close()
	ch, err := e.GetChannels(iface)
	if err != nil {
		return 0, err
	}
	return int(ch.RxCount + ch.CombinedCount), nil
}

// xdpPass is XDP_PASS: the frame goes on to the kernel's stack.
const xdpPass = 2

func setsockopt(fd, opt int, p unsafe.Pointer, n uintptr) error {
	_, _, errno := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), n, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

func getsockopt(fd, opt int, p unsafe.Pointer, n uintptr) error {
	l := uint32(n)
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), uintptr(unsafe.Pointer(&l)), 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// FD returns the AF_XDP socket: it polls readable when frames wait.
func (x *xskSocket) FD() int { return x.fd }

// SendFD returns the AF_PACKET send socket: it polls writable when a Send
// that found it full may be retried.
func (x *xskSocket) SendFD() int { return x.packetSocket.FD() }

// Close detaches the program and releases the sockets and their memory.
func (x *xskSocket) Close() error {
	var errs []error
	if x.link != nil {
		errs = append(errs, x.link.Close())
	}
	if x.packetSocket != nil {
		errs = append(errs, x.packetSocket.Close())
	}
	if x.prog != nil {
		errs = append(errs, x.prog.Close())
	}
	if x.xsks != nil {
		errs = append(errs, x.xsks.Close())
	}
	for _, r := range []*xskRing{&x.fill, &x.rx, &x.comp} {
		if r.mem != nil {
			errs = append(errs, unix.Munmap(r.mem))
			r.mem = nil
		}
	}
	if x.fd >= 0 {
		errs = append(errs, unix.Close(x.fd))
		x.fd = -1
	}
	if x.umem != nil {
		errs = append(errs, unix.Munmap(x.umem))
		x.umem = nil
	}
	return errors.Join(errs...)
}

// Recv copies received frames out of their chunks and gives the chunks back
// to the kernel; it makes no system call. A frame of several chunks is
// reassembled (truncated to its buffer, its real length reported).
func (x *xskSocket) Recv(bufs [][]byte, lens []int) (int, error) {
	prod := atomic.LoadUint32(x.rx.prod)
	n := 0
	for n < len(bufs) && x.rx.cached != prod {
		// The descriptors of a frame: all but the last have
		// XDP_PKT_CONTD. The kernel publishes a frame's descriptors
		// together; a frame not yet complete waits for the next call.
		end := x.rx.cached
		for {
			if end == prod {
				goto done
			}
			d := x.rx.xdesc(end)
			end++
			if d.Options&unix.XDP_PKT_CONTD == 0 {
				break
			}
		}
		total := 0
		for ; x.rx.cached != end; x.rx.cached++ {
			d := x.rx.xdesc(x.rx.cached)
			if total < len(bufs[n]) {
				copy(bufs[n][total:], x.umem[d.Addr:d.Addr+uint64(d.Len)])
			}
			total += int(d.Len)
			x.rxFree = append(x.rxFree, d.Addr&^(xskChunk-1))
		}
		lens[n] = total
		n++
	}
done:
	if n > 0 {
		atomic.StoreUint32(x.rx.cons, x.rx.cached)
		x.refill()
	}
	return n, nil
}

// Ready reports whether received frames wait, without a system call.
func (x *xskSocket) Ready() bool { return atomic.LoadUint32(x.rx.prod) != x.rx.cached }

// refill tops the fill ring up to fillTarget chunks, the most recently
// freed first.
//
// The chunks cycle through the kernel in the order of the fill ring, and
// the cost of the kernel's and Recv's copies grows with the number of
// chunks in circulation (on tracebed's VM, writing into chunks that had
// not been used for a while took a third of the sending thread's time:
// their cache lines and page-table entries were cold). So the ring holds
// only what the switch needs: fillTarget doubles, up to every chunk, when
// the kernel has used three quarters of it since the last call (a burst,
// or the switch's thread was descheduled), and halves, down to xskFillMin,
// after xskFillCalm without growing.
func (x *xskSocket) refill() {
	level := int(x.fill.cached - atomic.LoadUint32(x.fill.cons))
	if level < x.fillTarget/4 && x.fillTarget < xskChunks {
		x.fillTarget *= 2
		x.grown = time.Now()
	} else if x.fillTarget > xskFillMin && time.Since(x.grown) > xskFillCalm {
		x.fillTarget /= 2
		x.grown = time.Now()
	}
	for ; level < x.fillTarget && len(x.rxFree) > 0; level++ {
		*x.fill.addr(x.fill.cached) = x.rxFree[len(x.rxFree)-1]
		x.rxFree = x.rxFree[:len(x.rxFree)-1]
		x.fill.cached++
	}
	atomic.StoreUint32(x.fill.prod, x.fill.cached)
}

// KernelDrops returns how many frames the kernel dropped since the last
// call because the fill or RX ring was exhausted (the switch fell behind).
func (x *xskSocket) KernelDrops() uint64 {
	var st unix.XDPStatistics
	if err := getsockopt(x.fd, unix.XDP_STATISTICS, unsafe.Pointer(&st), unsafe.Sizeof(st)); err != nil {
		return 0
	}
	total := st.Rx_dropped + st.Rx_ring_full
	d := total - x.drops
	x.drops = total
	return d
}

// ioKind names the socket of a port for PortStats.IO.
func ioKind(io PortIO) string {
	switch io.(type) {
	case *xskSocket:
		return string(IOXDP)
	case *packetSocket, *ringSocket:
		return string(IOPacket)
	}
	return ""
}

// IOMode selects how the Go switch moves frames through its ports.
type IOMode string

const (
	// IOAuto is the port I/O that costs the kernel least per forwarded
	// frame on veths, as measured against the Linux bridge (docs/netns.md,
	// "Against the kernel's bridge"): today IOPacket. It is the default.
	IOAuto IOMode = "auto"
	// IOXDP receives through AF_XDP on every port (OpenXDP) and sends
	// through AF_PACKET; it fails where a port cannot have AF_XDP.
	IOXDP IOMode = "xdp"
	// IOPacket receives through an AF_PACKET socket's TPACKET_V2 ring
	// (OpenPacketRing) and sends with sendmmsg: every frame also passes
	// the packet taps of the switch's own interfaces, so captures there
	// see both directions (as with bmv2's and Mininet's switches).
	IOPacket IOMode = "afpacket"
)

// ParseIOMode parses an IOMode ("" is IOAuto).
func ParseIOMode(s string) (IOMode, error) {
	switch m := IOMode(s); m {
	case "":
		return IOAuto, nil
	case IOAuto, IOXDP, IOPacket:
		return m, nil
	}
	return "", fmt.Errorf("port I/O %q: want %s, %s or %s", s, IOAuto, IOXDP, IOPacket)
}

// openPort opens the I/O of one port in mode.
func openPort(mode IOMode, iface string, maxFrame int) (PortIO, error) {
	if mode == IOXDP {
		return OpenXDP(iface, maxFrame)
	}
	return OpenPacketRing(iface, Batch, maxFrame)
}
