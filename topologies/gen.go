package topologies

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/internal/yamlx"
)

// Params describe a generated topology. In an experiment spec they appear as
//
//	topology: {generate: leafspine, spines: 2, leaves: 4, hosts_per_leaf: 4, rate: 100Gbps}
type Params struct {
	Generate     string         `yaml:"generate,required"` // star, leafspine or fattree
	Name         string         `yaml:"name"`
	Hosts        int            `yaml:"hosts"`          // star
	Spines       int            `yaml:"spines"`         // leafspine
	Leaves       int            `yaml:"leaves"`         // leafspine
	HostsPerLeaf int            `yaml:"hosts_per_leaf"` // leafspine
	K            int            `yaml:"k"`              // fattree: even number of ports per switch
	Rate         units.Rate     `yaml:"rate"`           // host links
	FabricRate   units.Rate     `yaml:"fabric_rate"`    // switch-to-switch links; default Rate
	Delay        units.Duration `yaml:"delay"`
	Buffer       units.Bytes    `yaml:"buffer"`
	Aggregators  int            `yaml:"aggregators"`
	Queues       int            `yaml:"queues"`
	At           yamlx.Where    `yaml:"-"`
}

// Generators lists the generator names Generate accepts.
var Generators = []string{"star", "leafspine", "fattree"}

// MaxGeneratedHosts bounds generated topologies to what a run can hold.
const MaxGeneratedHosts = 65536

// Generate builds the File for p. Zero fields take defaults: 100Gbps, no
// delay, 1MiB buffers, 8 queues, no aggregators, and the sizes of the ready
// files (8 hosts; 2 spines × 4 leaves × 4 hosts; k = 4).
func Generate(p Params) (*File, error) {
	if p.Rate == 0 {
		p.Rate = DefaultRate
	}
	if p.FabricRate == 0 {
		p.FabricRate = p.Rate
	}
	if p.Buffer == 0 {
		p.Buffer = DefaultBuffer
	}
	if p.Queues == 0 {
		p.Queues = DefaultQueues
	}
	bad := func(key, format string, args ...any) error {
		w := p.At
		if w.Path == "" {
			w.Path = "topology"
		}
		return w.Errorf(key, format, args...)
	}
	if p.Aggregators < 0 || p.Aggregators > MaxAggregators {
		return nil, bad("aggregators", "%d; want 0 to %d aggregator slots per switch", p.Aggregators, MaxAggregators)
	}
	if p.Queues < 1 || p.Queues > MaxQueues {
		return nil, bad("queues", "%d egress queues; want 1 to %d", p.Queues, MaxQueues)
	}
	g := &gen{p: p}
	switch p.Generate {
	case "star":
		if p.Hosts == 0 {
			p.Hosts = 8
		}
		if p.Hosts < 1 || p.Hosts > MaxGeneratedHosts {
			return nil, bad("hosts", "%d hosts; want 1 to %d", p.Hosts, MaxGeneratedHosts)
		}
		g.file(p.Name, "star")
		g.node("tor", Switch)
		for h := 1; h <= p.Hosts; h++ {
			g.node(fmt.Sprintf("h%d", h), Host)
			g.link(fmt.Sprintf("h%d:eth0", h), fmt.Sprintf("tor:eth%d", h), false)
		}
	case "leafspine":
		if p.Spines == 0 {
			p.Spines = 2
		}
		if p.Leaves == 0 {
			p.Leaves = 4
		}
		if p.HostsPerLeaf == 0 {
			p.HostsPerLeaf = 4
		}
		for key, v := range map[string]int{"spines": p.Spines, "leaves": p.Leaves, "hosts_per_leaf": p.HostsPerLeaf} {
			if v < 1 || v > 4096 {
				return nil, bad(key, "%d; want 1 to 4096", v)
			}
		}
		if p.Leaves*p.HostsPerLeaf > MaxGeneratedHosts {
			return nil, bad("hosts_per_leaf", "%d hosts in all; at most %d", p.Leaves*p.HostsPerLeaf, MaxGeneratedHosts)
		}
		g.file(p.Name, fmt.Sprintf("leafspine-%dx%d", p.Spines, p.Leaves))
		for s := 1; s <= p.Spines; s++ {
			g.node(fmt.Sprintf("spine%d", s), Switch)
		}
		for l := 1; l <= p.Leaves; l++ {
			g.node(fmt.Sprintf("leaf%d", l), Switch)
		}
		h := 0
		for l := 1; l <= p.Leaves; l++ {
			for i := 1; i <= p.HostsPerLeaf; i++ {
				h++
				g.node(fmt.Sprintf("h%d", h), Host)
				g.link(fmt.Sprintf("h%d:eth0", h), fmt.Sprintf("leaf%d:eth%d", l, i), false)
			}
			for s := 1; s <= p.Spines; s++ {
				g.link(fmt.Sprintf("leaf%d:eth%d", l, p.HostsPerLeaf+s), fmt.Sprintf("spine%d:eth%d", s, l), true)
			}
		}
	case "fattree":
		if p.K == 0 {
			p.K = 4
		}
		if p.K < 2 || p.K%2 != 0 || p.K > 64 {
			return nil, bad("k", "%d; want an even number of switch ports from 2 to 64", p.K)
		}
		k, half := p.K, p.K/2
		g.file(p.Name, fmt.Sprintf("fattree-k%d", k))
		for c := 1; c <= half*half; c++ {
			g.node(fmt.Sprintf("core%d", c), Switch)
		}
		for pod := 1; pod <= k; pod++ {
			for i := 1; i <= half; i++ {
				g.node(fmt.Sprintf("agg%d_%d", pod, i), Switch)
			}
			for i := 1; i <= half; i++ {
				g.node(fmt.Sprintf("edge%d_%d", pod, i), Switch)
			}
		}
		h := 0
		for pod := 1; pod <= k; pod++ {
			for e := 1; e <= half; e++ {
				for i := 1; i <= half; i++ {
					h++
					g.node(fmt.Sprintf("h%d", h), Host)
					g.link(fmt.Sprintf("h%d:eth0", h), fmt.Sprintf("edge%d_%d:eth%d", pod, e, i), false)
				}
				for a := 1; a <= half; a++ {
					g.link(fmt.Sprintf("edge%d_%d:eth%d", pod, e, half+a), fmt.Sprintf("agg%d_%d:eth%d", pod, a, e), true)
				}
			}
			for a := 1; a <= half; a++ {
				for c := 1; c <= half; c++ {
					g.link(fmt.Sprintf("agg%d_%d:eth%d", pod, a, half+c), fmt.Sprintf("core%d:eth%d", (a-1)*half+c, pod), true)
				}
			}
		}
	case "":
		return nil, bad("generate", "missing; want one of %s", strings.Join(Generators, ", "))
	default:
		return nil, bad("generate", "%q is not a generator; want one of %s", p.Generate, strings.Join(Generators, ", "))
	}
	return &g.f, nil
}

type gen struct {
	p Params
	f File
}

func (g *gen) file(name, def string) {
	if name == "" {
		name = def
	}
	g.f.Name = name
	d := &g.f.Topology.Defaults
	d.Link.Rate = &g.p.Rate
	d.Link.Buffer = &g.p.Buffer
	if g.p.Delay != 0 {
		d.Link.Delay = &g.p.Delay
	}
	d.Switch.Queues = &g.p.Queues
	d.Switch.Aggregators = &g.p.Aggregators
}

func (g *gen) node(name string, k Kind) {
	g.f.Topology.Nodes = append(g.f.Topology.Nodes, NamedNode{Name: name, Spec: NodeSpec{Kind: string(k)}})
}

func (g *gen) link(a, b string, fabric bool) {
	l := LinkSpec{Endpoints: []string{a, b}}
	if fabric && g.p.FabricRate != g.p.Rate {
		l.Rate = &g.p.FabricRate
	}
	g.f.Topology.Links = append(g.f.Topology.Links, l)
}

// YAML renders f in the format Load reads: one line per node and per link.
func (f *File) YAML() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "name: %s\ntopology:\n", f.Name)
	d := f.Topology.Defaults
	if l := attrs(d.Link); l != "" || nodeAttrs(d.Switch) != "" {
		b.WriteString("  defaults:\n")
		if l != "" {
			fmt.Fprintf(&b, "    link: {%s}\n", l)
		}
		if s := nodeAttrs(d.Switch); s != "" {
			fmt.Fprintf(&b, "    switch: {%s}\n", s)
		}
	}
	b.WriteString("  nodes:\n")
	for _, n := range f.Topology.Nodes {
		s := n.Spec
		fields := []string{"kind: " + s.Kind}
		if s.IP != "" {
			fields = append(fields, "ip: "+s.IP)
		}
		if a := nodeAttrs(s); a != "" {
			fields = append(fields, a)
		}
		if len(s.Labels) > 0 {
			var ls []string
			for k, v := range s.Labels {
				ls = append(ls, fmt.Sprintf("%s: %q", k, v))
			}
			fields = append(fields, "labels: {"+strings.Join(slices.Sorted(slices.Values(ls)), ", ")+"}")
		}
		fmt.Fprintf(&b, "    %s: {%s}\n", n.Name, strings.Join(fields, ", "))
	}
	b.WriteString("  links:\n")
	for _, l := range f.Topology.Links {
		fields := []string{"endpoints: [" + strings.Join(l.Endpoints, ", ") + "]"}
		if a := attrs(l.LinkAttrs); a != "" {
			fields = append(fields, a)
		}
		fmt.Fprintf(&b, "    - {%s}\n", strings.Join(fields, ", "))
	}
	return b.Bytes()
}

func attrs(a LinkAttrs) string {
	var f []string
	if a.Rate != nil {
		f = append(f, "rate: "+a.Rate.String())
	}
	if a.Delay != nil {
		f = append(f, "delay: "+a.Delay.String())
	}
	if a.Buffer != nil {
		f = append(f, "buffer: "+a.Buffer.String())
	}
	for _, x := range []struct {
		k string
		v *units.Fraction
	}{{"loss", a.Loss}, {"duplicate", a.Duplicate}, {"reorder", a.Reorder}} {
		if x.v != nil {
			f = append(f, fmt.Sprintf("%s: %g", x.k, float64(*x.v)))
		}
	}
	return strings.Join(f, ", ")
}

func nodeAttrs(s NodeSpec) string {
	var f []string
	if s.Aggregators != nil {
		f = append(f, fmt.Sprintf("aggregators: %d", *s.Aggregators))
	}
	if s.Queues != nil {
		f = append(f, fmt.Sprintf("queues: %d", *s.Queues))
	}
	if s.Latency != nil {
		f = append(f, "latency: "+s.Latency.String())
	}
	return strings.Join(f, ", ")
}
