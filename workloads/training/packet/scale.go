package packet

import (
	"fmt"
	"math"
	"net/netip"

	"github.com/tracebed/tracebed/workloads/training/fabric"

	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/topologies"
	jobtrace "github.com/tracebed/tracebed/traces/jobs"
	"github.com/tracebed/tracebed/traces/models"
)

// Scaled is a scenario prepared for a packet-level run: the topology with
// link rates divided by the scale factor, aggregator memory and buffers
// resized to keep their size in line-rate windows, and hosts added for the
// controller and the parameter servers. docs/scaling.md ("In-network
// aggregation") gives the argument.
type Scaled struct {
	Top *topologies.Topology
	// Workers are the hosts jobs run on (the scenario's hosts);
	// Controller and PS the added service hosts.
	Workers    []string
	Controller string
	PS         map[string][]string
	// Net is the scenario's Net with Turnaround set to the host
	// turnaround the packet-level windows are sized for.
	Net fabric.Net
	// Factor divides rates and data volumes. Window and WindowScaled are
	// a rack-local job's line-rate window before and after scaling;
	// Memory multiplies aggregators and buffers (WindowScaled ÷ Window).
	Factor               float64
	Window, WindowScaled int
	Memory               float64
}

// ScaleParams are the choices ScaleTopology makes beyond the factor.
type ScaleParams struct {
	Factor float64
	// HostTurnaround is the result-to-next-packet time of a real host that
	// windows must cover in the scaled run (0: the scenario's turnaround).
	HostTurnaround float64 // seconds
	// Loss, if not negative, replaces every link's injected loss.
	Loss float64
	// PSPerSwitch is how many parameter-server hosts each switch with
	// aggregators gets (0: none).
	PSPerSwitch int
	// MinFrame, if above the scenario's INA frame, is the largest frame
	// the run sends (RoCEv2 frames of FreeINA's PS path): every buffer
	// keeps room for 8 of them.
	MinFrame int
}

// ScaleTopology builds the packet-level topology of a scenario given in
// paper units (top, net).
func ScaleTopology(top *topologies.Topology, net fabric.Net, p ScaleParams) (*Scaled, error) {
	if !(p.Factor >= 1) || math.IsInf(p.Factor, 0) {
		return nil, fmt.Errorf("scale %v: want 1 or more", p.Factor)
	}
	sc := &Scaled{Factor: p.Factor, Net: net, PS: map[string][]string{}}
	if p.HostTurnaround > 0 {
		sc.Net.Turnaround = fabric.Secs(p.HostTurnaround)
	}
	for _, h := range top.Hosts() {
		sc.Workers = append(sc.Workers, h.Name)
	}
	f := top.Spec()
	for i := range f.Topology.Links {
		a := &f.Topology.Links[i].LinkAttrs
		r := units.Rate(math.Round(float64(*a.Rate) / p.Factor))
		if r < units.Kbps {
			return nil, fmt.Errorf("topology %s: link %s scaled by %v runs at %v; want at least 1Kbps", top.Name, f.Topology.Links[i].Endpoints, p.Factor, r)
		}
		*a.Rate = r
	}
	rated, err := f.Build(top.File)
	if err != nil {
		return nil, err
	}
	sc.Window = fabric.LineRateDemand(top, net)
	sc.WindowScaled = fabric.LineRateDemand(rated, sc.Net)
	sc.Memory = float64(sc.WindowScaled) / float64(sc.Window)
	minBuffer := units.Bytes(8 * max(net.Frame, p.MinFrame))
	for i := range f.Topology.Nodes {
		s := &f.Topology.Nodes[i].Spec
		if s.Aggregators != nil && *s.Aggregators > 0 {
			m := max(1, int(math.Round(float64(*s.Aggregators)*sc.Memory)))
			s.Aggregators = &m
		}
	}
	for i := range f.Topology.Links {
		a := &f.Topology.Links[i].LinkAttrs
		b := max(minBuffer, units.Bytes(math.Round(float64(*a.Buffer)*sc.Memory)))
		a.Buffer = &b
		if p.Loss >= 0 {
			l := units.Fraction(p.Loss)
			a.Loss = &l
		}
	}
	// Service hosts: a controller, and parameter servers next to every
	// switch that aggregates, each on a link like that switch's first
	// host link (the flow model's dedicated PS links).
	used := map[string]bool{}
	ips := map[netip.Addr]bool{}
	for _, n := range top.Nodes {
		used[n.Name] = true
		ips[n.IP] = true
	}
	nextIP := netip.AddrFrom4([4]byte{10, 254, 0, 1})
	addHost := func(base, sw string) (string, error) {
		name := base
		for used[name] {
			name = "x" + name
		}
		used[name] = true
		for ips[nextIP] {
			nextIP = nextIP.Next()
		}
		ip := nextIP
		ips[ip] = true
		var attrs topologies.LinkAttrs
		for _, l := range f.Topology.Links {
			if hostLinkOf(top, l.Endpoints, sw) {
				attrs = l.LinkAttrs
				break
			}
		}
		if attrs.Rate == nil { // a spine: a link like the first host's
			for _, l := range f.Topology.Links {
				if hostLinkOf(top, l.Endpoints, "") {
					attrs = l.LinkAttrs
					break
				}
			}
		}
		f.Topology.Nodes = append(f.Topology.Nodes, topologies.NamedNode{Name: name, Spec: topologies.NodeSpec{Kind: string(topologies.Host), IP: ip.String()}})
		f.Topology.Links = append(f.Topology.Links, topologies.LinkSpec{Endpoints: []string{name, sw}, LinkAttrs: attrs})
		return name, nil
	}
	var ctlSwitch string
	for _, h := range top.Hosts() {
		ctlSwitch = h.Uplink().Node.Name
		break
	}
	if ctlSwitch == "" {
		return nil, fmt.Errorf("topology %s has no host", top.Name)
	}
	if sc.Controller, err = addHost("ctl", ctlSwitch); err != nil {
		return nil, err
	}
	nps := 0
	for _, sw := range top.Switches() {
		if sw.Aggregators <= 0 {
			continue
		}
		for range p.PSPerSwitch {
			nps++
			name, err := addHost(fmt.Sprintf("ps%d", nps), sw.Name)
			if err != nil {
				return nil, err
			}
			sc.PS[sw.Name] = append(sc.PS[sw.Name], name)
		}
	}
	if sc.Top, err = f.Build(top.File); err != nil {
		return nil, err
	}
	return sc, nil
}

// hostLinkOf reports whether a link joins a host of top to switch sw (to
// any node, when sw is empty).
func hostLinkOf(top *topologies.Topology, endpoints []string, sw string) bool {
	if len(endpoints) != 2 {
		return false
	}
	var names [2]string
	for i, e := range endpoints {
		for j := range len(e) {
			if e[j] == ':' {
				e = e[:j]
				break
			}
		}
		names[i] = e
	}
	for i := range 2 {
		if n := top.Node(names[i]); n != nil && n.IsHost() && (sw == "" || names[1-i] == sw) {
			return true
		}
	}
	return false
}

// ScaleProfiles returns a lookup of model profiles with gradients divided
// by the factor (whole int32 values, at least one).
func ScaleProfiles(lookup func(string) (models.Profile, bool), factor float64) func(string) (models.Profile, bool) {
	return func(name string) (models.Profile, bool) {
		p, ok := lookup(name)
		if !ok {
			return p, false
		}
		p.GradientBytes = 4 * max(1, int64(math.Round(float64(p.GradientBytes)/factor/4)))
		return p, true
	}
}

// MaxDistributed is the most distributed jobs that can run at once on
// hosts hosts: each needs two.
func MaxDistributed(js []jobtrace.Job, hosts int) int {
	n := 0
	for _, j := range js {
		if j.Workers > 1 {
			n++
		}
	}
	return min(n, hosts/2)
}
