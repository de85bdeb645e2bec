package topologies

import (
	"fmt"
	"reflect"
	"testing"
	"time"
)

// TestYAMLRoundTrip: a topology written with YAML and read back is the same
// network — nodes, addresses, MACs, switch resources, ports, links with all
// their attributes, and routes.
func TestYAMLRoundTrip(t *testing.T) {
	tweaked, err := Parse("tweaked.yaml", []byte(`name: tweaked
topology:
  defaults:
    link: {rate: 12.5Mbps, delay: 3us, buffer: 100KiB, loss: 0.01}
    switch: {aggregators: 64, queues: 4, latency: 2us}
  nodes:
    s1: {kind: switch, labels: {role: tor}}
    a: {kind: host, ip: 10.9.9.9}
    b: {kind: host}
    s2: {kind: switch, queues: 2}
    c: {kind: host, labels: {rack: "2"}}
  links:
    - {endpoints: [a, s1:p7], duplicate: 0.02}
    - {endpoints: [b:eth0, s1], reorder: 5%, rate: 1Gbps}
    - {endpoints: [s1, s2], delay: 1ms, buffer: 1500B}
    - {endpoints: [c, s2]}
`))
	if err != nil {
		t.Fatal(err)
	}
	tops := []*Topology{tweaked}
	for _, name := range ReadyFiles() {
		top, err := Open(name)
		if err != nil {
			t.Fatal(err)
		}
		tops = append(tops, top)
	}
	for _, top := range tops {
		t.Run(top.Name, func(t *testing.T) {
			back, err := Parse("back.yaml", top.YAML())
			if err != nil {
				t.Fatalf("%v\n%s", err, top.YAML())
			}
			if got, want := describe(back), describe(top); got != want {
				t.Errorf("read back differs:\n got %s\nwant %s\nYAML:\n%s", got, want, top.YAML())
			}
			if !reflect.DeepEqual(back.Routes(), top.Routes()) {
				t.Error("routes differ")
			}
		})
	}
}

// describe renders everything Build derives, without positions.
func describe(t *Topology) string {
	s := t.Name + ";"
	for _, n := range t.Nodes {
		s += fmt.Sprintf("%s %s %s %s agg=%d q=%d lat=%v labels=%v;", n.Name, n.Kind, n.IP, n.MAC, n.Aggregators, n.Queues, n.Latency, n.Labels)
		for _, p := range n.Ports {
			s += fmt.Sprintf(" %d %s %s peer=%s;", p.Num, p.Iface, p.MAC, p.Peer)
		}
	}
	for _, l := range t.Links {
		s += fmt.Sprintf("%s-%s %v %v %v %g %g %g;", l.A, l.B, l.Rate, time.Duration(l.Delay), l.Buffer, l.Loss, l.Duplicate, l.Reorder)
	}
	return s
}
