//go:build linux && !nonetns

package netns

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The Go switch reads its ports with AF_PACKET sockets, which are packet
// taps: the kernel hands them every frame before tc ingress runs. Without
// more, the switch namespace's own IPv4 stack would then also take each
// frame addressed to the port's MAC and discard it (forwarding is off) —
// work done on the sender's CPU for nothing, about a sixth of the Go
// switch's forwarding rate here. A tc ingress filter that drops every frame
// after the taps avoids it, equivalent to
//
//	tc qdisc add dev IF clsact
//	tc filter add dev IF ingress bpf direct-action obj drop.o
//
// with a two-instruction BPF program ("return TC_ACT_SHOT"), because this
// kernel has no matchall classifier or gact action. The filter is an
// optimisation: if the kernel refuses it, ports work without it.

// bpfInsn is one eBPF instruction.
type bpfInsn struct {
	code uint8
	regs uint8 // dst:4, src:4
	off  int16
	imm  int32
}

// bpfProgLoad is the head of union bpf_attr for BPF_PROG_LOAD; the kernel
// accepts a shorter attribute whose missing tail is zero. The pointer
// fields are __aligned_u64 in the kernel: typed as unsafe.Pointer so the
// runtime keeps (and, on a stack move, adjusts) them; this layout is that
// of 64-bit platforms.
type bpfProgLoad struct {
	progType    uint32
	insnCnt     uint32
	insns       unsafe.Pointer
	license     unsafe.Pointer
	logLevel    uint32
	logSize     uint32
	logBuf      uint64
	kernVersion uint32
	progFlags   uint32
	progName    [16]byte
}

// loadDropProgram loads a BPF_PROG_TYPE_SCHED_CLS program that drops every
// frame and returns its descriptor.
func loadDropProgram() (int, error) {
	insns := []bpfInsn{
		{code: 0xb7, imm: int32(netlink.TC_ACT_SHOT)}, // r0 = TC_ACT_SHOT
		{code: 0x95}, // exit
	}
	license := []byte("GPL\x00")
	attr := bpfProgLoad{
		progType: unix.BPF_PROG_TYPE_SCHED_CLS,
		insnCnt:  uint32(len(insns)),
		insns:    unsafe.Pointer(&insns[0]),
		license:  unsafe.Pointer(&license[0]),
	}
	copy(attr.progName[:], "tracebed_drop")
	if unsafe.Sizeof(uintptr(0)) != 8 {
		return -1, errors.New("the ingress drop program is loaded on 64-bit platforms only")
	}
	fd, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_PROG_LOAD, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	runtime.KeepAlive(insns)
	runtime.KeepAlive(license)
	if errno != 0 {
		return -1, fmt.Errorf("load BPF program: %w", errno)
	}
	return int(fd), nil
}

// dropIngress attaches the drop filter to link's ingress.
func dropIngress(h *netlink.Handle, link netlink.Link, prog int) error {
	idx := link.Attrs().Index
	q := &netlink.Clsact{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: idx, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}}
	if err := h.QdiscReplace(q); err != nil {
		return fmt.Errorf("clsact qdisc: %w", err)
	}
	f := &netlink.BpfFilter{
		FilterAttrs: netlink.FilterAttrs{LinkIndex: idx, Parent: netlink.HANDLE_MIN_INGRESS, Handle: netlink.MakeHandle(0, 1),
			Priority: 1, Protocol: unix.ETH_P_ALL},
		Fd: prog, Name: "tracebed_drop", DirectAction: true,
	}
	if err := h.FilterReplace(f); err != nil {
		return fmt.Errorf("ingress drop filter: %w", err)
	}
	return nil
}

// keepIngress removes the clsact qdisc and with it the drop filter.
func keepIngress(h *netlink.Handle, link netlink.Link) error {
	q := &netlink.Clsact{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: link.Attrs().Index, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}}
	if err := h.QdiscDel(q); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("remove clsact qdisc: %w", err)
	}
	return nil
}

// setSwitchIngress installs (drop true) or removes the ingress drop filter
// on every switch port. Installing is best effort: it reports whether the
// filter is in place.
func (n *Network) setSwitchIngress(drop bool) (bool, error) {
	prog := -1
	if drop {
		var err error
		if prog, err = loadDropProgram(); err != nil {
			return false, nil // an optimisation only
		}
		defer unix.Close(prog) // the filters hold their own references
	}
	for _, sw := range n.Topology.Switches() {
		h, err := n.Handle(sw.Name)
		if err != nil {
			return false, err
		}
		for _, p := range sw.Ports {
			l, err := h.LinkByName(p.Iface)
			if err == nil {
				if drop {
					err = dropIngress(h, l, prog)
				} else {
					err = keepIngress(h, l)
				}
			}
			if err != nil {
				h.Delete()
				if drop {
					return false, nil
				}
				return false, fmt.Errorf("netns: %s: %w", p, err)
			}
		}
		h.Delete()
	}
	return drop, nil
}
