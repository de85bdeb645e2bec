package fabric

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/tracebed/tracebed/emulator/frame"
	"github.com/tracebed/tracebed/p4/fwd"
	"github.com/tracebed/tracebed/p4/ina"
	"github.com/tracebed/tracebed/topologies"
)

func leafSpine(t *testing.T, leaves, perLeaf int) *topologies.Topology {
	t.Helper()
	f, err := topologies.Generate(topologies.Params{Generate: "leafspine", Spines: 2, Leaves: leaves, HostsPerLeaf: perLeaf, Aggregators: 64})
	if err != nil {
		t.Fatal(err)
	}
	top, err := f.Build("ls")
	if err != nil {
		t.Fatal(err)
	}
	return top
}

func names(c *Cluster, hosts []int) []string {
	var out []string
	for _, h := range hosts {
		out = append(out, c.Hosts[h].Name)
	}
	return out
}

func TestPlacementRackLocalFirst(t *testing.T) {
	c := NewCluster(leafSpine(t, 3, 4)) // racks: h1-4 leaf1, h5-8 leaf2, h9-12 leaf3
	place := func(n int) []int {
		t.Helper()
		hs, ok := c.Place(n)
		if !ok {
			t.Fatalf("cannot place %d (free %d)", n, c.Free())
		}
		return hs
	}
	a := place(3)
	if got := names(c, a); !slices.Equal(got, []string{"h1", "h2", "h3"}) {
		t.Fatalf("first job on %v", got)
	}
	// Best fit: a 1-worker job goes to the rack with one free host.
	b := place(1)
	if got := names(c, b); !slices.Equal(got, []string{"h4"}) {
		t.Errorf("1-worker job on %v; want h4 (best fit)", got)
	}
	// A 4-worker job fits rack 2 whole.
	d := place(4)
	if got := names(c, d); !slices.Equal(got, []string{"h5", "h6", "h7", "h8"}) {
		t.Errorf("4-worker job on %v", got)
	}
	sw, err := c.AggregationSwitch(d)
	if err != nil || sw.Name != "leaf2" {
		t.Errorf("rack-local job aggregates at %v (%v); want leaf2", sw, err)
	}
	c.Release(a)
	// 6 workers fit no rack: span the racks with most free hosts (leaf3:
	// 4, then leaf1: 3).
	e := place(6)
	if got := names(c, e); !slices.Equal(got, []string{"h9", "h10", "h11", "h12", "h1", "h2"}) {
		t.Errorf("spanning job on %v", got)
	}
	sw, err = c.AggregationSwitch(e)
	if err != nil || sw.Name != "spine1" {
		t.Errorf("spanning job aggregates at %v (%v); want spine1", sw, err)
	}
	// With a job holding spine1, the next job across racks goes to spine2;
	// in two levels, through the ToRs of its racks.
	c.Hold(sw)
	c.TwoLevel = true
	tr, err := c.Tree(e)
	if err != nil || tr.Top.Name != "spine2" || len(tr.Lower) != 2 || tr.Lower[0].Name != "leaf3" || tr.Lower[1].Name != "leaf1" {
		t.Errorf("tree %v %v (%v); want spine2 over leaf3, leaf1", tr.Top, tr.Lower, err)
	}
	c.Unhold(sw)
	if tr, _ := c.Tree(e); tr.Top.Name != "spine1" {
		t.Errorf("after Unhold the job goes to %v; want spine1", tr.Top)
	}
	if _, ok := c.Place(2); ok {
		t.Errorf("placed 2 with %d free", c.Free())
	}
	if _, ok := c.Place(0); ok {
		t.Error("placed 0 workers")
	}
	if c.Free() != 1 {
		t.Errorf("%d free, want 1", c.Free())
	}
}

func TestPaths(t *testing.T) {
	top := leafSpine(t, 2, 2)
	c := NewCluster(top)
	h1, h3 := top.Node("h1"), top.Node("h3")
	ring := flow{NodePort, NodePort}
	p := c.path(h1, h3, ring, false)
	if len(p) != 4 {
		t.Fatalf("h1→h3: %d hops, want 4", len(p))
	}
	if p[0].from != h1 || p[1].from.Name != "leaf1" || (p[2].from.Name != "spine1" && p[2].from.Name != "spine2") || p[3].from.Name != "leaf2" {
		t.Errorf("path %v %v %v %v", p[0].from.Name, p[1].from.Name, p[2].from.Name, p[3].from.Name)
	}
	// ECMP: host pairs spread over both spines.
	spines := map[string]int{}
	for _, a := range []string{"h1", "h2"} {
		for _, b := range []string{"h3", "h4"} {
			spines[c.path(top.Node(a), top.Node(b), ring, false)[2].from.Name]++
			spines[c.path(top.Node(b), top.Node(a), ring, false)[2].from.Name]++
		}
	}
	if len(spines) != 2 {
		t.Errorf("host-to-host paths cross spines %v; want both", spines)
	}
	// Directions: both ends of a link map to different directed links.
	back := c.path(h3, h1, ring, false)
	if dirLink(p[0]) == dirLink(back[3]) || p[0].link != back[3].link {
		t.Error("the two directions of h1's link share a directed index")
	}
}

// emitted records the port a pipeline sent a frame out of.
type emitted struct{ port int }

func (e *emitted) Emit(port, _ int, _ []byte) { e.port = port }

// TestPathsAreThePackets: the path the estimates take for a flow is the
// one p4/fwd forwards its packets on, hop by hop (the same ECMP hash of
// the same 5-tuple), for every pair of hosts and several ports, on a
// leaf-spine and a fat-tree with equal-cost choices at several levels.
func TestPathsAreThePackets(t *testing.T) {
	ft, err := topologies.Generate(topologies.Params{Generate: "fattree", K: 4})
	if err != nil {
		t.Fatal(err)
	}
	fat, err := ft.Build("ft")
	if err != nil {
		t.Fatal(err)
	}
	for _, top := range []*topologies.Topology{leafSpine(t, 4, 3), fat} {
		c := NewCluster(top)
		routes := top.Routes()
		pipes := map[*topologies.Node]*fwd.Pipeline{}
		for _, sw := range top.Switches() {
			pipes[sw] = fwd.New(sw, routes[sw.Name])
		}
		hosts := top.Hosts()
		for _, src := range hosts {
			for _, dst := range hosts {
				if src == dst {
					continue
				}
				for _, f := range []flow{{NodePort, NodePort}, {NodePort, ina.Port}, {40001, 40002}} {
					hops := c.path(src, dst, f, false)
					fr := frame.AppendUDP(nil, frame.UDP{Src: netip.AddrPortFrom(src.IP, f.sport), Dst: netip.AddrPortFrom(dst.IP, f.dport)}, []byte("x"))
					n := src.Ports[0].Peer.Node
					for i, h := range hops[1:] {
						var e emitted
						pipes[n].Process(0, 1, fr, &e)
						if h.from != n || n.Ports[e.port-1].Link != h.link {
							t.Fatalf("%s: %s→%s ports %d→%d: hop %d leaves %s on port %d, the estimate's path on %s's link %v", top.Name, src.Name, dst.Name, f.sport, f.dport, i+1, n.Name, e.port, h.from.Name, h.link)
						}
						n = n.Ports[e.port-1].Peer.Node
					}
					if n != dst {
						t.Fatalf("%s: %s→%s: the packet reached %s", top.Name, src.Name, dst.Name, n.Name)
					}
				}
			}
		}
	}
}
