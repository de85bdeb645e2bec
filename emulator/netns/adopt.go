//go:build linux && !nonetns

package netns

import (
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"

	"github.com/tracebed/tracebed/topologies"
)

// Adopt returns the Network of a run whose namespaces another tool built —
// Mininet, through the helper module of package emulator/netns/mininet,
// which publishes each node's namespace under the run's names — after
// checking that they hold what Up would have made: every interface of the
// topology, named, addressed and with the MAC and MTU Up gives it, up; each
// host with its address. It then does what such a tool may not: TX
// checksum offload off on the hosts and, unless opts.Bridge, the ingress
// drop on switch ports. Shaping, routes and neighbours are the builder's
// (Mininet's TCLink and the helper's host configuration). opts.MTU is the
// MTU the links must have (0: DefaultMTU).
func Adopt(runID string, topo *topologies.Topology, opts Options) (*Network, error) {
	n, err := Attach(runID, topo)
	if err != nil {
		return nil, err
	}
	n.MTU, n.l2Hosts = opts.MTU, opts.L2Hosts
	if n.MTU == 0 {
		n.MTU = DefaultMTU
	}
	if err := n.verify(); err != nil {
		return nil, err
	}
	for _, h := range topo.Hosts() {
		iface := h.Ports[0].Iface
		if err := n.Do(h.Name, func() error { return disableTxOffload(iface) }); err != nil {
			return nil, fmt.Errorf("netns: host %s: %s: %w", h.Name, iface, err)
		}
	}
	if !opts.Bridge {
		if n.IngressDrop, err = n.setSwitchIngress(true); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// verify checks the interfaces and host addresses of every node against
// the topology (see Adopt).
func (n *Network) verify() error {
	var errs []error
	for _, node := range n.Topology.Nodes {
		h, err := n.Handle(node.Name)
		if err != nil {
			return err
		}
		for _, p := range node.Ports {
			l, err := h.LinkByName(p.Iface)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: no interface %s: %w", node.Name, p.Iface, err))
				continue
			}
			a := l.Attrs()
			mac := p.MAC
			if node.IsHost() {
				mac = node.MAC
			}
			if a.HardwareAddr.String() != net.HardwareAddr(mac[:]).String() {
				errs = append(errs, fmt.Errorf("%s: MAC %s, want %s", p, a.HardwareAddr, net.HardwareAddr(mac[:])))
			}
			if a.MTU != n.MTU {
				errs = append(errs, fmt.Errorf("%s: MTU %d, want %d", p, a.MTU, n.MTU))
			}
			if a.Flags&net.FlagUp == 0 {
				errs = append(errs, fmt.Errorf("%s is down", p))
			}
			if node.IsHost() {
				addrs, err := h.AddrList(l, netlink.FAMILY_V4)
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: addresses: %w", p, err))
					continue
				}
				found := false
				for _, ad := range addrs {
					ones, _ := ad.Mask.Size()
					found = found || ad.IP.Equal(net.IP(node.IP.AsSlice())) && ones == 32
				}
				if !found {
					errs = append(errs, fmt.Errorf("%s: no address %s/32", p, node.IP))
				}
			}
		}
		h.Delete()
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("netns: run %s does not match topology %s: %w", n.RunID, n.Topology.Name, err)
	}
	return nil
}

// SetLink brings every link between nodes a and b administratively up or
// down, both ends, as Mininet's 'link a b up|down' does. Frames sent on a
// link that is down are lost (a switch counts them as transmit errors).
func (n *Network) SetLink(a, b string, up bool) error {
	na, nb := n.Topology.Node(a), n.Topology.Node(b)
	for _, x := range []struct {
		name string
		node *topologies.Node
	}{{a, na}, {b, nb}} {
		if x.node == nil {
			return fmt.Errorf("netns: no node %q in topology %s", x.name, n.Topology.Name)
		}
	}
	found := false
	for _, p := range na.Ports {
		if p.Peer.Node != nb {
			continue
		}
		found = true
		for _, end := range []*topologies.Port{p, p.Peer} {
			if err := n.setPort(end, up); err != nil {
				return err
			}
		}
	}
	if !found {
		return fmt.Errorf("netns: %s and %s are not linked", a, b)
	}
	if !up {
		return nil
	}
	// The kernel flushed a host's routes when its link went down: put
	// them back as Up installed them.
	for _, node := range []*topologies.Node{na, nb} {
		if node.IsHost() {
			if err := n.readdressHost(node, n.bridged || n.l2Hosts); err != nil {
				return err
			}
		}
	}
	return nil
}

// SetL2Hosts records that the hosts of an attached network are addressed
// for L2 switches (Options.L2Hosts, or bridges), so that SetLink restores
// their routes and neighbours that way.
func (n *Network) SetL2Hosts(l2 bool) { n.l2Hosts = l2 }

func (n *Network) setPort(p *topologies.Port, up bool) error {
	h, err := n.Handle(p.Node.Name)
	if err != nil {
		return err
	}
	defer h.Delete()
	l, err := h.LinkByName(p.Iface)
	if err != nil {
		return fmt.Errorf("netns: %s: %w", p, err)
	}
	if up {
		if err := h.LinkSetUp(l); err != nil {
			return fmt.Errorf("netns: %s: set up: %w", p, err)
		}
		return nil
	}
	if err := h.LinkSetDown(l); err != nil {
		return fmt.Errorf("netns: %s: set down: %w", p, err)
	}
	return nil
}

// LinkUp reports whether both ends of the link of port p are up.
func (n *Network) LinkUp(p *topologies.Port) (bool, error) {
	for _, end := range []*topologies.Port{p, p.Peer} {
		h, err := n.Handle(end.Node.Name)
		if err != nil {
			return false, err
		}
		l, err := h.LinkByName(end.Iface)
		h.Delete()
		if err != nil {
			return false, fmt.Errorf("netns: %s: %w", end, err)
		}
		if l.Attrs().Flags&net.FlagUp == 0 {
			return false, nil
		}
	}
	return true, nil
}
