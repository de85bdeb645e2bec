//go:build linux && !nonetns

package netns

import (
	"fmt"

	"github.com/safchain/ethtool"
	"github.com/vishvananda/netlink"
)

// shape installs an HTB hierarchy on link's egress that holds it to rate
// bits per second, equivalent to
//
//	tc qdisc add dev IF root handle 1: htb default 1
//	tc class add dev IF parent 1: classid 1:1 htb rate R ceil R quantum Q
//	tc qdisc add dev IF parent 1:1 handle 10: pfifo
//
// through netlink; the pfifo holds the device's txqueuelen (HostQueue
// packets). The token bucket holds htbBucket(rate) bytes.
func shape(h *netlink.Handle, link netlink.Link, rate uint64, mtu int) error {
	if rate == 0 {
		return nil
	}
	idx := link.Attrs().Index
	root := netlink.NewHtb(netlink.QdiscAttrs{LinkIndex: idx, Handle: netlink.MakeHandle(1, 0), Parent: netlink.HANDLE_ROOT})
	root.Defcls = 1
	if err := h.QdiscReplace(root); err != nil {
		return fmt.Errorf("htb qdisc: %w", err)
	}
	burst, quantum := HTBClass(rate, mtu)
	class := netlink.NewHtbClass(
		netlink.ClassAttrs{LinkIndex: idx, Parent: netlink.MakeHandle(1, 0), Handle: netlink.MakeHandle(1, 1)},
		netlink.HtbClassAttrs{Rate: rate, Ceil: rate, Quantum: uint32(quantum), Buffer: uint32(burst), Cbuffer: uint32(burst)})
	if err := h.ClassReplace(class); err != nil {
		return fmt.Errorf("htb class %d bit/s: %w", rate, err)
	}
	leaf := &netlink.GenericQdisc{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: idx, Parent: netlink.MakeHandle(1, 1), Handle: netlink.MakeHandle(10, 0)}, QdiscType: "pfifo"}
	if err := h.QdiscReplace(leaf); err != nil {
		return fmt.Errorf("pfifo leaf: %w", err)
	}
	return nil
}

// HTBClass returns the parameters of the HTB class that shapes a host's
// link of rate bit/s on an interface of the given MTU: its token bucket
// (htbBucket) and its quantum, in bytes. HTB lends in quanta of rate/r2q
// bytes; the kernel wants 1 MTU to 200000 bytes, so the quantum is clamped
// instead of letting it warn. Mininet's TracebedIntf
// (mininet/tracebed_mininet.py) computes the same, which a test of that
// package checks.
func HTBClass(rate uint64, mtu int) (burst, quantum uint64) {
	frame := uint64(max(mtu, DefaultMTU) + 100)
	return htbBucket(rate, frame), min(max(rate/8/10, frame), 200000)
}

// htbBucket is the token bucket of a link of rate bit/s whose largest
// frame is frame bytes, in bytes: a frame, but no more than 8 ms of
// traffic, and no less than 1 ms.
//
// The bucket is what a timer that fires late may send at once to make up,
// so the long-run rate holds on a machine that wakes threads milliseconds
// late; and it is what a host that was idle puts on the wire at once,
// which the simulated link never does. At tens of Mbit/s a bucket under
// about 3.5 ms of traffic lost rate (dynaina-netns at scale 5,000, 20
// Mbit/s: the ring's JCT 1.09–1.23× sim's with 1 ms or 2.5 ms, 1.03–1.08
// with a jumbo frame; at 10 Mbit/s, with a 4 ms bucket, lab 2's pool of
// 32 once ran at 0.37 of the link under 'go test ./...' load, every pool
// size three times slower than alone, so load and bucket were not told
// apart, and the cap keeps the frame there). At a few
// Mbit/s a jumbo frame is tens of milliseconds, more than a scaled switch
// buffer of a few frames holds (at scale 40,000, 2.5 Mbit/s, a 9,100-byte
// bucket let each host send 29 ms at once, and the ring ran at 2.1× sim's
// JCT); there frames are long enough to absorb late timers themselves,
// since HTB sends a frame whenever the bucket is not empty and lets it go
// negative (so a frame larger than the bucket still passes at the link's
// rate). From about 9 Mbit/s up the bucket is the jumbo frame it always
// was. tc's default, rate/HZ + MTU, is the unbounded frame term.
func htbBucket(rate, frame uint64) uint64 {
	ms := rate / 8 / 1000
	return min(max(ms, min(frame, 8*ms), 1), 1<<30)
}

// disableTxOffload turns TX checksum offload (and with it TSO, which needs
// it) off on the named interface of the calling thread's namespace, as
// 'ethtool -K IF tx off' does, through the SIOCETHTOOL ioctl. Without it the
// kernel hands TCP and UDP segments to the veth with partial checksums,
// which a user-space switch forwards unchanged and the receiver drops.
func disableTxOffload(iface string) error {
	e, err := ethtool.NewEthtool()
	if err != nil {
		return fmt.Errorf("ethtool: %w", err)
	}
	defer e.Close()
	names, err := e.FeatureNames(iface)
	if err != nil {
		return fmt.Errorf("ethtool features: %w", err)
	}
	change := map[string]bool{}
	for _, f := range []string{"tx-checksum-ip-generic", "tx-checksum-ipv4", "tx-checksum-ipv6", "tx-checksum-sctp", "tx-tcp-segmentation", "tx-tcp6-segmentation", "tx-generic-segmentation"} {
		if _, ok := names[f]; ok {
			change[f] = false
		}
	}
	if err := e.Change(iface, change); err != nil {
		return fmt.Errorf("ethtool: turn TX offload off: %w", err)
	}
	feats, err := e.Features(iface)
	if err != nil {
		return fmt.Errorf("ethtool features: %w", err)
	}
	if feats["tx-checksum-ip-generic"] {
		return fmt.Errorf("ethtool: TX checksum offload is still on")
	}
	return nil
}

// checkOffloadOff reports an error if iface still has TX checksum offload.
func checkOffloadOff(iface string) error {
	e, err := ethtool.NewEthtool()
	if err != nil {
		return err
	}
	defer e.Close()
	feats, err := e.Features(iface)
	if err != nil {
		return err
	}
	for _, f := range []string{"tx-checksum-ip-generic", "tx-tcp-segmentation"} {
		if feats[f] {
			return fmt.Errorf("%s: %s is on", iface, f)
		}
	}
	return nil
}
