// Package fabric is what the INA experiments know of the network: the
// cluster of GPU hosts and where jobs are placed (rack-local first), where
// a job aggregates (its tree: the racks' ToRs and a top switch, chosen
// with the other jobs in view), and the estimate every policy and both
// levels of simulation use — the bottleneck rate on every worker's path
// (a job's own flows sharing a link share its rate), the round trips,
// the windows and the all-reduce times in pool mode, in shared mode and
// on the host ring (docs/dynaina.md, "Estimates from the topology"). Net
// holds the protocol and host parameters the estimates depend on.
package fabric

import (
	"fmt"
	"slices"

	"github.com/tracebed/tracebed/emulator/frame"
	"github.com/tracebed/tracebed/topologies"
)

// Cluster places workers on the hosts of a topology, one worker per host
// (one GPU each), rack-local first.
type Cluster struct {
	Top   *topologies.Topology
	Hosts []*topologies.Node
	// TwoLevel lets jobs across racks aggregate in two levels: each rack's
	// ToR sums its workers' contributions, the top switch sums the racks'
	// (Tree). Without it they aggregate at the top switch alone.
	TwoLevel bool
	free     []bool
	rack     []int   // index into racks of each host
	racks    [][]int // host indices attached to each switch with hosts, in topology order
	dist     map[*topologies.Node][]int
	tops     map[*topologies.Node]int // jobs aggregating at each top switch
}

// NewCluster returns a cluster with every host of top free.
func NewCluster(top *topologies.Topology) *Cluster {
	return NewClusterOf(top, top.Hosts())
}

// NewClusterOf returns a cluster of the given hosts of top (the others
// run services: a controller, parameter servers).
func NewClusterOf(top *topologies.Topology, hosts []*topologies.Node) *Cluster {
	c := &Cluster{Top: top, Hosts: hosts, dist: map[*topologies.Node][]int{}, tops: map[*topologies.Node]int{}}
	c.free = make([]bool, len(c.Hosts))
	c.rack = make([]int, len(c.Hosts))
	rackOf := map[*topologies.Node]int{}
	for i, h := range c.Hosts {
		c.free[i] = true
		tor := h.Uplink().Node
		r, ok := rackOf[tor]
		if !ok {
			r = len(c.racks)
			rackOf[tor] = r
			c.racks = append(c.racks, nil)
		}
		c.racks[r] = append(c.racks[r], i)
		c.rack[i] = r
	}
	return c
}

// Free returns the number of free hosts.
func (c *Cluster) Free() int {
	n := 0
	for _, f := range c.free {
		if f {
			n++
		}
	}
	return n
}

func (c *Cluster) freeIn(r int) []int {
	var out []int
	for _, h := range c.racks[r] {
		if c.free[h] {
			out = append(out, h)
		}
	}
	return out
}

// Place reserves n hosts and returns their indices in c.Hosts, or false if
// fewer than n are free. Rack-local first: if one rack has n free hosts, the
// job goes to the rack with the fewest free hosts that fits (best fit,
// leaving large holes for large jobs); otherwise it spans the racks with the
// most free hosts, fewest racks first.
func (c *Cluster) Place(n int) ([]int, bool) {
	if n < 1 || n > c.Free() {
		return nil, false
	}
	best, bestFree := -1, 0
	for r := range c.racks {
		if f := len(c.freeIn(r)); f >= n && (best < 0 || f < bestFree) {
			best, bestFree = r, f
		}
	}
	var hosts []int
	if best >= 0 {
		hosts = c.freeIn(best)[:n]
	} else {
		order := make([]int, len(c.racks))
		for i := range order {
			order[i] = i
		}
		slices.SortStableFunc(order, func(a, b int) int { return len(c.freeIn(b)) - len(c.freeIn(a)) })
		for _, r := range order {
			for _, h := range c.freeIn(r) {
				if len(hosts) < n {
					hosts = append(hosts, h)
				}
			}
		}
	}
	for _, h := range hosts {
		c.free[h] = false
	}
	return hosts, true
}

// Release frees hosts reserved by Place.
func (c *Cluster) Release(hosts []int) {
	for _, h := range hosts {
		c.free[h] = true
	}
}

// distances returns hop counts from every node to dst over paths that do
// not cross other hosts.
func (c *Cluster) distances(dst *topologies.Node) []int {
	if d, ok := c.dist[dst]; ok {
		return d
	}
	d := make([]int, len(c.Top.Nodes))
	for i := range d {
		d[i] = -1
	}
	d[dst.Index] = 0
	queue := []*topologies.Node{dst}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		if n.IsHost() && n != dst {
			continue
		}
		for _, p := range n.Ports {
			if m := p.Peer.Node; d[m.Index] < 0 {
				d[m.Index] = d[n.Index] + 1
				queue = append(queue, m)
			}
		}
	}
	c.dist[dst] = d
	return d
}

// Tree is where a job aggregates: Top, and for a job across racks that
// aggregates in two levels the racks' ToRs (Lower, in the order of the
// job's workers), each summing its rack's contributions before Top sums
// the racks'. Rack gives each worker's index in Lower (-1: none).
type Tree struct {
	Top   *topologies.Node
	Lower []*topologies.Node
	Rack  []int
}

// Switches returns the tree's switches: Top, then Lower.
func (t Tree) Switches() []*topologies.Node {
	return append([]*topologies.Node{t.Top}, t.Lower...)
}

// Tree returns where a job on hosts aggregates, with the fabric in view.
// The top switch is one closest to all the workers (fewest hops to the
// farthest, then fewest in all): the ToR for a rack-local job. Among
// equally close switches — the spines of a leaf-spine — it takes the one
// fewest running jobs aggregate at (Hold), then the one with the most
// aggregators, then the first in the topology, so that jobs spread over
// the spines instead of all meeting at the first. A job across racks
// aggregates in two levels (TwoLevel) when its top and every rack's ToR
// have aggregators. The caller holds the top with Hold while the job runs.
func (c *Cluster) Tree(hosts []int) (Tree, error) {
	var (
		best           *topologies.Node
		bestMax, bestS int
	)
	for _, sw := range c.Top.Switches() {
		mx, sum := 0, 0
		ok := true
		for _, h := range hosts {
			d := c.distances(c.Hosts[h])[sw.Index]
			if d < 0 {
				ok = false
				break
			}
			mx, sum = max(mx, d), sum+d
		}
		if !ok {
			continue
		}
		better := best == nil || mx < bestMax || mx == bestMax && sum < bestS
		if !better && mx == bestMax && sum == bestS {
			if l, lb := c.tops[sw], c.tops[best]; l != lb {
				better = l < lb
			} else {
				better = sw.Aggregators > best.Aggregators
			}
		}
		if better {
			best, bestMax, bestS = sw, mx, sum
		}
	}
	if best == nil {
		return Tree{}, fmt.Errorf("no switch reaches every worker of the job")
	}
	t := Tree{Top: best, Rack: make([]int, len(hosts))}
	for i := range t.Rack {
		t.Rack[i] = -1
	}
	if !c.TwoLevel || best.Aggregators <= 0 {
		return t, nil
	}
	for i, h := range hosts {
		tor := c.Hosts[h].Uplink().Node
		if tor == best {
			return Tree{Top: best, Rack: t.Rack}, nil // rack-local, or a worker under the top
		}
		if tor.Aggregators <= 0 {
			return Tree{Top: best, Rack: t.Rack}, nil
		}
		k := slices.Index(t.Lower, tor)
		if k < 0 {
			k = len(t.Lower)
			t.Lower = append(t.Lower, tor)
		}
		t.Rack[i] = k
	}
	return t, nil
}

// AggregationSwitch returns the top switch of the job's tree.
func (c *Cluster) AggregationSwitch(hosts []int) (*topologies.Node, error) {
	t, err := c.Tree(hosts)
	return t.Top, err
}

// Hold counts a job aggregating at top until Unhold: Tree spreads jobs
// over equally close top switches by this count.
func (c *Cluster) Hold(top *topologies.Node) { c.tops[top]++ }

// Unhold ends a Hold.
func (c *Cluster) Unhold(top *topologies.Node) {
	if c.tops[top]--; c.tops[top] <= 0 {
		delete(c.tops, top)
	}
}

// hop is one directed link traversal: the link and whether it goes from
// its A end to its B end.
type hop struct {
	link    *topologies.Link
	forward bool
	from    *topologies.Node
}

// NodePort is the UDP port of the packet-level worker agents (package
// packet): ring packets go from and to it, and INA data leaves from it.
// Paths are hashed with it, so the flow model's paths are the packets'.
const NodePort = 41000

// flow is the 5-tuple of a UDP flow (addresses are the ends' nodes'),
// which ECMP hashes.
type flow struct{ sport, dport uint16 }

// path returns the hops the packets of a UDP flow from src to dst take
// (ports f), as p4/fwd forwards them: at every node with several
// equal-cost next hops (the ports of the route, in port order), the one
// frame.TupleHash of the flow's 5-tuple picks, the same at every hop.
// With replica set, the first hop is instead the lowest-numbered port, as
// the copies of a multicast result leave (ina.Members).
func (c *Cluster) path(src, dst *topologies.Node, f flow, replica bool) []hop {
	d := c.distances(dst)
	var out []hop
	var cands []*topologies.Port
	h := frame.TupleHash(src.IP, dst.IP, frame.ProtoUDP, f.sport, f.dport)
	for n := src; n != dst; {
		cands = cands[:0]
		for _, p := range n.Ports {
			if m := p.Peer.Node; d[m.Index] == d[n.Index]-1 && (!m.IsHost() || m == dst) {
				cands = append(cands, p)
			}
		}
		if len(cands) == 0 {
			return nil
		}
		slices.SortFunc(cands, func(a, b *topologies.Port) int { return a.Num - b.Num })
		next := cands[0]
		if len(cands) > 1 && !(replica && n == src) && !n.IsHost() {
			next = cands[h%uint32(len(cands))]
		}
		out = append(out, hop{link: next.Link, forward: next.Link.A == next, from: n})
		n = next.Peer.Node
	}
	return out
}
