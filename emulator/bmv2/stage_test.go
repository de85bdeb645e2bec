//go:build linux && !nonetns

package bmv2

import (
	"testing"

	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/topologies"
)

// TestStageTopology: a switch's link stage has the switch's ports, on links
// with their attributes to peers of the same kinds, then as many ports to
// bmv2 on links that neither delay nor lose.
func TestStageTopology(t *testing.T) {
	f, err := topologies.Generate(topologies.Params{Generate: "leafspine", Spines: 2, Leaves: 2, HostsPerLeaf: 2,
		Rate: 10 * units.Mbps, FabricRate: 40 * units.Mbps, Delay: units.Duration(3000), Queues: 4})
	if err != nil {
		t.Fatal(err)
	}
	top, err := f.Build("ls")
	if err != nil {
		t.Fatal(err)
	}
	top.Links[0].Loss = 0.01
	for _, sw := range top.Switches() {
		st, err := stageTopology(sw)
		if err != nil {
			t.Fatalf("%s: %v", sw.Name, err)
		}
		node := st.Node(stageName)
		P := len(sw.Ports)
		if len(node.Ports) != 2*P || node.Queues != sw.Queues || node.Latency != 0 {
			t.Fatalf("%s: stage has %d ports, %d queues, latency %v", sw.Name, len(node.Ports), node.Queues, node.Latency)
		}
		for _, p := range sw.Ports {
			sp, inner := node.Ports[p.Num-1], node.Ports[P+p.Num-1]
			l, sl := p.Link, sp.Link
			if sp.Num != p.Num || sl.Rate != l.Rate || sl.Delay != l.Delay || sl.Buffer != l.Buffer || sl.Loss != l.Loss ||
				sl.Duplicate != l.Duplicate || sl.Reorder != l.Reorder || sp.Peer.Node.Kind != p.Peer.Node.Kind {
				t.Errorf("%s port %d: stage link %+v peer %s, want %+v peer %s", sw.Name, p.Num, sl, sp.Peer.Node.Kind, l, p.Peer.Node.Kind)
			}
			if inner.Peer.Node.Name != "bmv2" || inner.Link.Delay != 0 || inner.Link.Loss != 0 || inner.Link.Rate != stageRate {
				t.Errorf("%s port %d: inner link %+v to %s", sw.Name, p.Num, inner.Link, inner.Peer.Node.Name)
			}
		}
	}
}
