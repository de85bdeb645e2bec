package topologies

import (
	"github.com/tracebed/tracebed/internal/units"
)

// Spec returns t as a File with every attribute written out: each node's
// kind, address and switch resources, each link's interfaces and physical
// attributes. Building it gives a topology equal to t (same nodes in the
// same order, so the same MACs, ports, addresses and routes), which is how
// a topology built in memory (generated, scaled, embedded in a spec) is
// handed to another process, such as a 'tracebed switch'.
func (t *Topology) Spec() *File {
	f := &File{Name: t.Name}
	for _, n := range t.Nodes {
		s := NodeSpec{Kind: string(n.Kind), IP: n.IP.String(), Labels: n.Labels}
		if !n.IsHost() {
			agg, q, lat := n.Aggregators, n.Queues, units.Duration(n.Latency)
			s.Aggregators, s.Queues = &agg, &q
			if n.Latency != 0 {
				s.Latency = &lat
			}
		}
		f.Topology.Nodes = append(f.Topology.Nodes, NamedNode{Name: n.Name, Spec: s})
	}
	for _, l := range t.Links {
		rate, delay, buf := l.Rate, units.Duration(l.Delay), l.Buffer
		a := LinkAttrs{Rate: &rate, Delay: &delay, Buffer: &buf}
		for _, x := range []struct {
			v   float64
			dst **units.Fraction
		}{{l.Loss, &a.Loss}, {l.Duplicate, &a.Duplicate}, {l.Reorder, &a.Reorder}} {
			if x.v != 0 {
				v := units.Fraction(x.v)
				*x.dst = &v
			}
		}
		f.Topology.Links = append(f.Topology.Links, LinkSpec{
			Endpoints: []string{l.A.Node.Name + ":" + l.A.Iface, l.B.Node.Name + ":" + l.B.Iface},
			LinkAttrs: a,
		})
	}
	return f
}

// YAML renders t in the format Load reads, every attribute explicit (see
// Spec).
func (t *Topology) YAML() []byte { return t.Spec().YAML() }
