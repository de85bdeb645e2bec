//go:build linux && !nonetns

package goswitch

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ringSocket is an AF_PACKET port that receives through a TPACKET_V2
// receive ring and sends with sendmmsg.
//
// The kernel copies each frame arriving on the interface into the next
// free slot of a ring mapped into the switch's memory, in the softirq that
// delivers it to the packet taps (the sender's context on a veth), and
// marks the slot TP_STATUS_USER: Recv reads the slots without a system
// call and hands them back by marking them TP_STATUS_KERNEL. Against
// recvmmsg on the socket's queue, this saves the skb clone, the queueing
// and the receive system calls; against AF_XDP on a veth, the copy of the
// frame into a page of its own (the veth's XDP path) and the NAPI hand-off.
// TPACKET_V2 hands over each frame as it arrives (TPACKET_V3's blocks are
// handed over when full or after a timeout of at least a millisecond: too
// late for an emulator's microseconds).
type ringSocket struct {
	*packetSocket
	ring      []byte
	frameSize int
	frames    int    // a power of two
	next      int    // the slot Recv reads next
	truncated uint64 // frames dropped for their slot, not yet reported
}

// The ring's geometry: ringBytes of slots, each holding a frame of up to
// the port's maxFrame bytes after the slot's header (a few thousand
// frames at 1,500 bytes, as SocketBuffer holds).
const ringBytes = 8 << 20

// tpacketAlign is TPACKET_ALIGN.
func tpacketAlign(n int) int { return (n + unix.TPACKET_ALIGNMENT - 1) &^ (unix.TPACKET_ALIGNMENT - 1) }

// ringMacOff is where the kernel puts an Ethernet frame in a slot
// (tpacket_rcv's macoff): after TPACKET2_HDRLEN (the header and a
// sockaddr_ll) and 16 bytes, aligned, less the Ethernet header, so that
// the network header is aligned.
var ringMacOff = tpacketAlign(tpacketAlign(unix.SizeofTpacket2Hdr)+unix.SizeofSockaddrLinklayer+16) - 14

// OpenPacketRing opens an AF_PACKET port on the interface named iface in
// the calling thread's namespace that receives through a TPACKET_V2 ring
// (see ringSocket) frames of up to maxFrame bytes (or the interface's
// MTU, if less: a slot holds them; a longer frame is reported with its
// length and truncated, or dropped and counted in KernelDrops if the
// buffer would have held it), and sends with sendmmsg in
// batches of up to batch frames. Like OpenAFPacket it receives every frame
// arriving on the interface, not the ones it sends.
func OpenPacketRing(iface string, batch, maxFrame int) (PortIO, error) {
	// Protocol 0 until bound: no frame of another interface reaches the
	// ring before the bind.
	ifi, fd, err := packetSocketOn(iface)
	if err != nil {
		return nil, err
	}
	r := &ringSocket{packetSocket: &packetSocket{fd: fd, msgs: make([]unix.Mmsghdr, batch), iovs: make([]unix.Iovec, batch)}}
	fail := func(what string, err error) (PortIO, error) {
		r.Close()
		return nil, fmt.Errorf("port %s: %s: %w", iface, what, err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VERSION, unix.TPACKET_V2); err != nil {
		return fail("PACKET_VERSION", err)
	}
	// A slot: the header, the frame at ringMacOff; a power of two, so
	// that slots tile the ring's blocks exactly. No frame longer than the
	// interface's MTU arrives on a veth.
	need := min(maxFrame, ifi.MTU+frameOverhead)
	r.frameSize = 1 << 11
	for r.frameSize-ringMacOff < need {
		r.frameSize <<= 1
	}
	block := max(r.frameSize, 1<<16)
	req := unix.TpacketReq{Block_size: uint32(block), Block_nr: uint32(ringBytes / block), Frame_size: uint32(r.frameSize)}
	req.Frame_nr = req.Block_nr * uint32(block/r.frameSize)
	if err := unix.SetsockoptTpacketReq(fd, unix.SOL_PACKET, unix.PACKET_RX_RING, &req); err != nil {
		return fail("PACKET_RX_RING", err)
	}
	r.frames = int(req.Frame_nr)
	if r.frames&(r.frames-1) != 0 {
		// Powers of two all (slot, block and ring sizes): Recv wraps
		// its slot index with a mask.
		return fail("PACKET_RX_RING", fmt.Errorf("%d slots, not a power of two", r.frames))
	}
	if r.ring, err = unix.Mmap(fd, 0, int(req.Block_size*req.Block_nr), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		return fail("ring mmap", err)
	}
	if what, err := bindPort(fd, ifi.Index); err != nil {
		return fail(what, err)
	}
	return r, nil
}

// slot returns the header of slot i.
func (r *ringSocket) slot(i int) *unix.Tpacket2Hdr {
	return (*unix.Tpacket2Hdr)(unsafe.Pointer(&r.ring[i*r.frameSize]))
}

// capacity returns the longest frame a slot holds.
func (r *ringSocket) capacity() int { return r.frameSize - ringMacOff }

// Recv copies the frames waiting in the ring, in order, and hands their
// slots back to the kernel; it makes no system call.
func (r *ringSocket) Recv(bufs [][]byte, lens []int) (int, error) {
	n := 0
	for n < len(bufs) {
		h := r.slot(r.next)
		if atomic.LoadUint32(&h.Status)&unix.TP_STATUS_USER == 0 {
			break
		}
		off := r.next*r.frameSize + int(h.Mac)
		copy(bufs[n], r.ring[off:off+int(h.Snaplen)])
		lens[n] = int(h.Len)
		atomic.StoreUint32(&h.Status, unix.TP_STATUS_KERNEL)
		r.next = (r.next + 1) & (r.frames - 1)
		if h.Snaplen < h.Len && lens[n] <= len(bufs[n]) {
			// Cut short by its slot (longer than the interface's
			// MTU), though the buffer would hold it: dropped, as
			// PortIO allows a truncated frame only when reported
			// longer than its buffer.
			r.truncated++
			continue
		}
		n++
	}
	if n == 0 {
		// Called with nothing in the ring: poll reported an error
		// (the interface went down; recvmmsg would have returned and
		// cleared it). Reading SO_ERROR clears it, or poll would
		// report it forever.
		unix.GetsockoptInt(r.fd, unix.SOL_SOCKET, unix.SO_ERROR)
	}
	return n, nil
}

// KernelDrops returns how many frames were dropped since the last call:
// by the kernel, the ring being full (the switch fell behind), or cut
// short by their slot.
func (r *ringSocket) KernelDrops() uint64 {
	d := r.packetSocket.KernelDrops() + r.truncated
	r.truncated = 0
	return d
}

// Ready reports whether a frame waits in the ring, without a system call.
func (r *ringSocket) Ready() bool {
	return atomic.LoadUint32(&r.slot(r.next).Status)&unix.TP_STATUS_USER != 0
}

// Close releases the ring and the socket.
func (r *ringSocket) Close() error {
	if r.ring != nil {
		unix.Munmap(r.ring)
		r.ring = nil
	}
	return r.packetSocket.Close()
}
