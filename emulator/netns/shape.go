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
// packets). The bucket holds at least one frame of mtu bytes.
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
	// HTB lends in quanta of rate/r2q bytes; the kernel wants 1 MTU to
	// 200000 bytes, so clamp it instead of letting it warn.
	frame := uint64(max(mtu, DefaultMTU) + 100)
	quantum := min(max(rate/8/10, frame), 200000)
	// The bucket holds 1 ms of traffic (at least one frame): a timer that
	// fires late then sends what is owed, so the long-run rate holds,
	// while bursts stay at 1 ms. (tc's default, rate/HZ + MTU with the
	// high-resolution HZ of 10^9, rounds to nothing at 10 Gbit/s.)
	burst := min(max(rate/8/1000, frame), 1<<30)
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
