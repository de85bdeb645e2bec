//go:build linux && !nonetns

package netns

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"

	"github.com/tracebed/tracebed/topologies"
)

// NetnsDir is where named network namespaces are bind-mounted (as by
// 'ip netns add'), so 'ip netns exec' reaches them too.
const NetnsDir = "/run/netns"

// RunDir holds one directory per running topology (state, sockets,
// topology file). It is only accessible to root.
const RunDir = "/run/tracebed"

// DefaultMTU is the MTU of links when Options.MTU is zero.
const DefaultMTU = 1500

// HostQueue is the packet limit of a host's egress queue (the leaf qdisc
// under the HTB class), the usual txqueuelen of an Ethernet device.
const HostQueue = 1000

// Options configure Up.
type Options struct {
	// RunID names the run; empty picks a random one. It must be 1–6
	// lowercase letters or digits, so that every derived name fits the
	// kernel's 15-byte interface-name limit.
	RunID string
	// NoShaping leaves host links unshaped (the rate is then whatever the
	// veth and the switch achieve).
	NoShaping bool
	// Bridge puts a Linux bridge in every switch namespace instead of
	// leaving the ports to a Go switch (loop-free topologies only).
	Bridge bool
	// L2Hosts addresses the hosts for switches that route on the IPv4
	// destination without rewriting Ethernet addresses (bmv2 running
	// fwd.p4 or farmem.p4): every other host's address on-link with its
	// own MAC as a permanent neighbour, and every switch's address with
	// the MAC of the host's uplink port, as under Bridge. The Go switch
	// works with either addressing.
	L2Hosts bool
	// MTU is the MTU of every veth (both ends); 0 keeps the kernel's
	// 1500. Jumbo frames (up to MaxMTU) carry datagrams larger than
	// 1472 bytes, such as a far-memory page, in one frame.
	MTU int
}

// MaxMTU is the largest MTU Options.MTU accepts: the jumbo-frame size
// common to Ethernet NICs and switches.
const MaxMTU = 9000

// Network is a topology brought up in namespaces. Its methods are safe for
// use by one goroutine at a time.
type Network struct {
	Topology *topologies.Topology
	RunID    string
	// IngressDrop reports whether the switch ports drop frames in tc
	// ingress after the Go switch's packet taps saw them (ingress.go).
	IngressDrop bool
	// MTU is the MTU of every link.
	MTU int

	bridged bool
	l2Hosts bool
}

// Namespace returns the name of node's namespace (under /run/netns).
func (n *Network) Namespace(node string) string { return NamespaceName(n.RunID, node) }

// NamespacePath returns the path of node's namespace.
func (n *Network) NamespacePath(node string) string {
	return filepath.Join(NetnsDir, n.Namespace(node))
}

// Dir returns the run's directory under RunDir.
func (n *Network) Dir() string { return filepath.Join(RunDir, Prefix+n.RunID) }

// tempLink names the two ends of link i while they are in the root
// namespace, before they move and take their interface names.
func tempLink(runID string, i int, end byte) string {
	return fmt.Sprintf("tb%s%d%c", runID, i, end)
}

// Up creates the namespaces, links, addresses, routes, neighbour entries and
// shaping of topo. On error, everything created so far is removed. It needs
// root (CAP_NET_ADMIN and CAP_SYS_ADMIN).
func Up(ctx context.Context, topo *topologies.Topology, opts Options) (_ *Network, err error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("netns: bringing up a topology needs root")
	}
	id := opts.RunID
	if id == "" {
		id = NewRunID()
	}
	if err := ValidRunID(id); err != nil {
		return nil, err
	}
	for _, l := range topo.Links {
		if len(tempLink(id, l.Index, 'a')) > 15 {
			return nil, fmt.Errorf("netns: topology %s has too many links (%d)", topo.Name, len(topo.Links))
		}
		for _, p := range []*topologies.Port{l.A, l.B} {
			if len(p.Iface) > 15 {
				return nil, fmt.Errorf("netns: interface %s: names are limited to 15 bytes", p)
			}
		}
	}
	if opts.MTU != 0 && (opts.MTU < 576 || opts.MTU > MaxMTU) {
		return nil, fmt.Errorf("netns: MTU %d: want 576 to %d bytes (0 for the default 1500)", opts.MTU, MaxMTU)
	}
	n := &Network{Topology: topo, RunID: id, MTU: opts.MTU, l2Hosts: opts.L2Hosts}
	if n.MTU == 0 {
		n.MTU = DefaultMTU
	}
	// Claim the run id before creating anything: a run id in use is
	// never touched, and from here on everything named after it is ours.
	if err := Claim(id); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			n.Down()
		}
	}()
	if err := shareNetnsDir(); err != nil {
		return nil, err
	}
	for _, node := range topo.Nodes {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := n.createNamespace(node); err != nil {
			return nil, err
		}
	}
	for _, l := range topo.Links {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := n.createLink(l); err != nil {
			return nil, fmt.Errorf("netns: link %s–%s: %w", l.A, l.B, err)
		}
	}
	for _, node := range topo.Hosts() {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := n.configureHost(node, opts); err != nil {
			return nil, fmt.Errorf("netns: host %s: %w", node.Name, err)
		}
	}
	if opts.Bridge {
		if err := n.BridgeSwitches(); err != nil {
			return nil, err
		}
	} else if n.IngressDrop, err = n.setSwitchIngress(true); err != nil {
		return nil, err
	}
	return n, nil
}

// createNamespace creates node's named namespace with loopback up and IPv6
// off (so no router solicitations or neighbour discovery reach the switch).
func (n *Network) createNamespace(node *topologies.Node) error {
	name := n.Namespace(node.Name)
	h, err := newNamedNS(name)
	if err != nil {
		return fmt.Errorf("netns: create namespace %s: %w", name, err)
	}
	h.Close()
	return n.Do(node.Name, func() error {
		for _, key := range []string{"net/ipv6/conf/all/disable_ipv6", "net/ipv6/conf/default/disable_ipv6"} {
			if err := os.WriteFile("/proc/sys/"+key, []byte("1"), 0o644); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("sysctl %s: %w", key, err)
			}
		}
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		return netlink.LinkSetUp(lo)
	})
}

// newNamedNS creates a named namespace without leaving the calling thread in
// it (netns.NewNamed switches the current thread).
func newNamedNS(name string) (vnetns.NsHandle, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := vnetns.Get()
	if err != nil {
		return vnetns.None(), err
	}
	defer orig.Close()
	h, err := vnetns.NewNamed(name)
	if serr := vnetns.Set(orig); serr != nil {
		// The thread is in the wrong namespace: keep it locked so the
		// runtime discards it.
		runtime.LockOSThread()
		return vnetns.None(), fmt.Errorf("return to the original namespace: %w", serr)
	}
	return h, err
}

// Handle returns a netlink handle for node's namespace; the caller deletes it.
func (n *Network) Handle(node string) (*netlink.Handle, error) {
	h, err := vnetns.GetFromPath(n.NamespacePath(node))
	if err != nil {
		return nil, fmt.Errorf("netns: open namespace of %s: %w", node, err)
	}
	defer h.Close()
	nh, err := netlink.NewHandleAt(h)
	if err != nil {
		return nil, fmt.Errorf("netns: netlink in namespace of %s: %w", node, err)
	}
	return nh, nil
}

// Do runs f on a locked OS thread inside node's namespace (pkg/ns). Sockets
// f opens belong to that namespace and may be used from any goroutine.
func (n *Network) Do(node string, f func() error) error {
	return ns.WithNetNSPath(n.NamespacePath(node), func(ns.NetNS) error { return f() })
}

// createLink creates link l's veth pair in the root namespace under
// temporary names, moves each end into its node's namespace, renames it to
// its interface name, sets the port's MAC address and brings it up.
func (n *Network) createLink(l *topologies.Link) error {
	a, b := tempLink(n.RunID, l.Index, 'a'), tempLink(n.RunID, l.Index, 'b')
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: a, TxQLen: HostQueue, MTU: n.MTU}, PeerName: b, PeerTxQLen: HostQueue, PeerMTU: uint32(n.MTU)}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("create veth %s/%s: %w", a, b, err)
	}
	for _, end := range []struct {
		tmp  string
		port *topologies.Port
	}{{a, l.A}, {b, l.B}} {
		if err := n.placeEnd(end.tmp, end.port); err != nil {
			netlink.LinkDel(veth) // removes both ends wherever they are
			return fmt.Errorf("%s: %w", end.port, err)
		}
	}
	return nil
}

func (n *Network) placeEnd(tmp string, p *topologies.Port) error {
	link, err := netlink.LinkByName(tmp)
	if err != nil {
		return err
	}
	nsh, err := vnetns.GetFromPath(n.NamespacePath(p.Node.Name))
	if err != nil {
		return err
	}
	defer nsh.Close()
	if err := netlink.LinkSetNsFd(link, int(nsh)); err != nil {
		return fmt.Errorf("move into namespace: %w", err)
	}
	h, err := n.Handle(p.Node.Name)
	if err != nil {
		return err
	}
	defer h.Delete()
	if link, err = h.LinkByName(tmp); err != nil {
		return err
	}
	if err := h.LinkSetName(link, p.Iface); err != nil {
		return fmt.Errorf("rename to %s: %w", p.Iface, err)
	}
	mac := p.MAC
	if p.Node.IsHost() {
		mac = p.Node.MAC
	}
	if err := h.LinkSetHardwareAddr(link, net.HardwareAddr(mac[:])); err != nil {
		return fmt.Errorf("set MAC %s: %w", mac, err)
	}
	return h.LinkSetUp(link)
}

// configureHost gives a host its address, its route through the switch it
// hangs off, a permanent neighbour entry for that switch, TX checksum
// offload off and the link's rate as HTB shaping.
//
// Hosts are addressed as in the P4 tutorials: the host's /32 address on
// eth0, the attached switch's address reachable on-link, a default route via
// the switch and a static neighbour entry mapping the switch's address to
// the MAC of the switch port, so hosts never ARP and the switch routes on
// the IPv4 destination.
func (n *Network) configureHost(node *topologies.Node, opts Options) error {
	h, err := n.Handle(node.Name)
	if err != nil {
		return err
	}
	defer h.Delete()
	port := node.Ports[0]
	link, err := h.LinkByName(port.Iface)
	if err != nil {
		return err
	}
	addr := &netlink.Addr{IPNet: hostNet(node.IP)}
	if err := h.AddrAdd(link, addr); err != nil {
		return fmt.Errorf("address %s: %w", node.IP, err)
	}
	if err := n.setHostRoutes(h, link, node, opts.L2Hosts); err != nil {
		return err
	}
	if err := n.Do(node.Name, func() error { return disableTxOffload(port.Iface) }); err != nil {
		return fmt.Errorf("%s: %w", port.Iface, err)
	}
	if !opts.NoShaping {
		if err := shape(h, link, uint64(port.Link.Rate), n.MTU); err != nil {
			return fmt.Errorf("%s: shaping: %w", port.Iface, err)
		}
	}
	return nil
}

func hostNet(a netip.Addr) *net.IPNet {
	return &net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(32, 32)}
}

var defaultDst = &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}

// setHostRoutes installs a host's routes and neighbour entries: routed
// through its switch (l2 false) or, under Linux bridges, every other host
// directly on the link with its own MAC (l2 true).
func (n *Network) setHostRoutes(h *netlink.Handle, link netlink.Link, node *topologies.Node, l2 bool) error {
	idx := link.Attrs().Index
	// Start from a clean slate: remove routes and permanent neighbours.
	routes, _ := h.RouteList(link, netlink.FAMILY_V4)
	for i := range routes {
		if routes[i].Protocol != netlink.RouteProtocol(2) { // keep kernel routes
			h.RouteDel(&routes[i])
		}
	}
	neighs, _ := h.NeighList(idx, netlink.FAMILY_V4)
	for i := range neighs {
		h.NeighDel(&neighs[i])
	}
	neigh := func(ip netip.Addr, mac [6]byte) error {
		return h.NeighSet(&netlink.Neigh{LinkIndex: idx, Family: netlink.FAMILY_V4, State: netlink.NUD_PERMANENT,
			IP: net.IP(ip.AsSlice()), HardwareAddr: net.HardwareAddr(mac[:])})
	}
	if l2 {
		if err := h.RouteReplace(&netlink.Route{LinkIndex: idx, Dst: defaultDst, Scope: netlink.SCOPE_LINK}); err != nil {
			return fmt.Errorf("on-link default route: %w", err)
		}
		for _, o := range n.Topology.Hosts() {
			if o != node {
				if err := neigh(o.IP, o.MAC); err != nil {
					return fmt.Errorf("neighbour %s: %w", o.IP, err)
				}
			}
		}
		// Switches' own addresses (e.g. INA packets addressed to a
		// switch) go to the uplink, never resolved by ARP.
		for _, sw := range n.Topology.Switches() {
			if err := neigh(sw.IP, node.Uplink().MAC); err != nil {
				return fmt.Errorf("neighbour %s: %w", sw.IP, err)
			}
		}
		return nil
	}
	up := node.Uplink()
	gw := up.Node.IP
	if err := h.RouteReplace(&netlink.Route{LinkIndex: idx, Dst: hostNet(gw), Scope: netlink.SCOPE_LINK}); err != nil {
		return fmt.Errorf("route to switch %s: %w", gw, err)
	}
	if err := h.RouteReplace(&netlink.Route{LinkIndex: idx, Dst: defaultDst, Gw: net.IP(gw.AsSlice())}); err != nil {
		return fmt.Errorf("default route via %s: %w", gw, err)
	}
	if err := neigh(gw, up.MAC); err != nil {
		return fmt.Errorf("neighbour %s: %w", gw, err)
	}
	return nil
}

// BridgeSwitches turns every switch into a Linux bridge over its ports and
// re-addresses the hosts for plain L2 forwarding: the kernel's own
// forwarding, the baseline the Go switch is measured against. The switch
// graph must be loop-free (bridges do not run spanning tree here), and no
// Go switch may hold the ports meanwhile.
func (n *Network) BridgeSwitches() error {
	if err := loopFree(n.Topology); err != nil {
		return err
	}
	if _, err := n.setSwitchIngress(false); err != nil { // the bridge must see the frames
		return err
	}
	n.IngressDrop = false
	for _, sw := range n.Topology.Switches() {
		h, err := n.Handle(sw.Name)
		if err != nil {
			return err
		}
		err = func() error {
			// No multicast snooping: the bridge would send IGMP queries
			// and reports of its own into the hosts.
			off := false
			br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}, MulticastSnooping: &off}
			if err := h.LinkAdd(br); err != nil {
				return fmt.Errorf("netns: bridge in %s: %w", sw.Name, err)
			}
			for _, p := range sw.Ports {
				l, err := h.LinkByName(p.Iface)
				if err != nil {
					return err
				}
				if err := h.LinkSetMaster(l, br); err != nil {
					return fmt.Errorf("netns: %s into br0: %w", p, err)
				}
			}
			return h.LinkSetUp(br)
		}()
		h.Delete()
		if err != nil {
			return err
		}
		if err := n.Do(sw.Name, bridgeWithoutNetfilter); err != nil {
			return fmt.Errorf("netns: bridge in %s: %w", sw.Name, err)
		}
	}
	n.bridged = true
	return n.readdressHosts(true)
}

// bridgeWithoutNetfilter turns off, in the calling thread's namespace,
// the netfilter hooks that br_netfilter (where the kernel has it) runs on
// every bridged frame by default: the bridge forwards at its fastest, as
// on a kernel without br_netfilter, and the namespace's iptables (empty)
// would change nothing.
func bridgeWithoutNetfilter() error {
	for _, name := range []string{"iptables", "ip6tables", "arptables"} {
		err := os.WriteFile("/proc/sys/net/bridge/bridge-nf-call-"+name, []byte("0\n"), 0)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// UnbridgeSwitches removes the bridges BridgeSwitches made and restores
// routed host addressing, leaving the ports to Go switches again.
func (n *Network) UnbridgeSwitches() error {
	for _, sw := range n.Topology.Switches() {
		h, err := n.Handle(sw.Name)
		if err != nil {
			return err
		}
		if br, err := h.LinkByName("br0"); err == nil {
			err = h.LinkDel(br)
			if err != nil {
				h.Delete()
				return fmt.Errorf("netns: remove bridge of %s: %w", sw.Name, err)
			}
		}
		h.Delete()
	}
	n.bridged = false
	var err error
	if n.IngressDrop, err = n.setSwitchIngress(true); err != nil {
		return err
	}
	return n.readdressHosts(n.l2Hosts)
}

func (n *Network) readdressHosts(l2 bool) error {
	for _, node := range n.Topology.Hosts() {
		if err := n.readdressHost(node, l2); err != nil {
			return err
		}
	}
	return nil
}

// readdressHost installs a host's routes and neighbours (setHostRoutes).
func (n *Network) readdressHost(node *topologies.Node, l2 bool) error {
	h, err := n.Handle(node.Name)
	if err != nil {
		return err
	}
	defer h.Delete()
	link, err := h.LinkByName(node.Ports[0].Iface)
	if err == nil {
		err = n.setHostRoutes(h, link, node, l2)
	}
	if err != nil {
		return fmt.Errorf("netns: host %s: %w", node.Name, err)
	}
	return nil
}

// loopFree reports an error if the switches and links form a cycle.
func loopFree(t *topologies.Topology) error {
	parent := make([]int, len(t.Nodes))
	for i := range parent {
		parent[i] = i
	}
	var find func(int) int
	find = func(i int) int {
		for parent[i] != i {
			parent[i] = parent[parent[i]]
			i = parent[i]
		}
		return i
	}
	for _, l := range t.Links {
		a, b := find(l.A.Node.Index), find(l.B.Node.Index)
		if a == b {
			return fmt.Errorf("netns: topology %s has a loop through %s–%s: Linux bridges need a loop-free topology", t.Name, l.A, l.B)
		}
		parent[a] = b
	}
	return nil
}

// Down removes the run's namespaces (and with them every veth and qdisc),
// any link left in the root namespace and the run directory. It first ends
// every process still inside the namespaces. It removes as much as it can
// and returns the first error.
func (n *Network) Down() error {
	return removeRun(n.RunID)
}

// String describes the network in one line.
func (n *Network) String() string {
	return fmt.Sprintf("run %s: %s (namespaces %s*)", n.RunID, n.Topology.Summary(), Prefix+n.RunID+"-")
}

// NodeOfNamespace splits a namespace name into run id and node name.
func NodeOfNamespace(name string) (runID, node string, ok bool) {
	rest, ok := strings.CutPrefix(name, Prefix)
	if !ok {
		return "", "", false
	}
	runID, node, ok = strings.Cut(rest, "-")
	return runID, node, ok && runIDPattern.MatchString(runID) && node != ""
}

// Attach returns the Network of a run that is already up (brought up by
// another process, e.g. 'tracebed topo up'), after checking that the
// namespaces of every node exist.
func Attach(runID string, topo *topologies.Topology) (*Network, error) {
	if err := ValidRunID(runID); err != nil {
		return nil, err
	}
	n := &Network{Topology: topo, RunID: runID}
	for _, node := range topo.Nodes {
		if _, err := os.Stat(n.NamespacePath(node.Name)); err != nil {
			return nil, fmt.Errorf("netns: run %s has no namespace for %s: %w", runID, node.Name, err)
		}
	}
	return n, nil
}

// ErrRunInUse is wrapped by the error of Claim (and so of Up) when the
// run id is taken.
var ErrRunInUse = errors.New("run id in use")

// Claim reserves run id for a new run by creating its run directory
// (RunDir/tb-ID) exclusively. It fails, wrapping ErrRunInUse, when the
// directory or any namespace or temporary link named after id exists: a
// live run, or the remains of a killed one, is never touched. Up claims its
// id; a tool that builds the namespaces itself (Mininet, package
// emulator/netns/mininet) claims it first and removes the run with Remove.
func Claim(id string) error {
	if err := ValidRunID(id); err != nil {
		return err
	}
	if err := os.MkdirAll(RunDir, 0o700); err != nil {
		return fmt.Errorf("netns: %w", err)
	}
	inUse := func(what string) error {
		return fmt.Errorf("netns: run %s: %w (%s exists): choose another run id; 'tracebed topo status' lists the runs, 'tracebed topo down --run %s' or 'tracebed cleanup --run %s' removes it",
			id, ErrRunInUse, what, id, id)
	}
	dir := filepath.Join(RunDir, Prefix+id)
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, os.ErrExist) {
			return inUse("its run directory " + dir)
		}
		return fmt.Errorf("netns: %w", err)
	}
	entries, _ := os.ReadDir(NetnsDir)
	for _, e := range entries {
		if rid, _, ok := NodeOfNamespace(e.Name()); ok && rid == id {
			os.Remove(dir)
			return inUse("namespace " + e.Name())
		}
	}
	links, err := LinkList()
	if err != nil {
		os.Remove(dir)
		return err
	}
	for _, l := range links {
		if isTempLink(l.Attrs().Name, id) {
			os.Remove(dir)
			return inUse("link " + l.Attrs().Name)
		}
	}
	return nil
}

// Remove removes run id as Down does, knowing only its id: the processes
// in its namespaces, the namespaces, its temporary links and directory.
func Remove(runID string) error {
	if err := ValidRunID(runID); err != nil {
		return err
	}
	return removeRun(runID)
}
