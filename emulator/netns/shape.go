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
	// HTB lends in quanta of rate/r2q bytes; the kernel wants 1 MTU to
	// 200000 bytes, so clamp it instead of letting it warn.
	frame := uint64(max(mtu, DefaultMTU) + 100)
	quantum := min(max(rate/8/10, frame), 200000)
	burst := htbBucket(rate)
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

// htbBucket is the token bucket of a link of rate bit/s, in bytes: 1 ms
// of traffic, so a timer that fires late sends what is owed and the
// long-run rate holds, while what leaves at once after an idle spell stays
// near what the simulated link would have sent in that millisecond. HTB
// sends a frame whenever the bucket is not empty and lets it go negative,
// so a frame larger than the bucket still passes at the link's rate: the
// bucket needs no room for an MTU. (It used to: at least one 9,100-byte
// jumbo frame, which at 2.5 Mbit/s let a host put 29 ms of traffic on the
// wire at once, more than a scaled switch buffer of a few frames holds;
// the drops and timeouts doubled the ring's all-reduce times against sim.
// tc's default, rate/HZ + MTU with the high-resolution HZ of 10^9, has the
// same MTU term.)
func htbBucket(rate uint64) uint64 {
	return min(max(rate/8/1000, 1), 1<<30)
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
