package training

import (
	"fmt"
	"slices"

	"github.com/tracebed/tracebed/topologies"
)

// Cluster places workers on the hosts of a topology, one worker per host
// (one GPU each), rack-local first.
type Cluster struct {
	Top   *topologies.Topology
	Hosts []*topologies.Node
	free  []bool
	rack  []int   // index into racks of each host
	racks [][]int // host indices attached to each switch with hosts, in topology order
	dist  map[*topologies.Node][]int
}

// NewCluster returns a cluster with every host of top free.
func NewCluster(top *topologies.Topology) *Cluster {
	return newCluster(top, top.Hosts())
}

// newCluster returns a cluster of the given hosts of top (the others run
// services: a controller, parameter servers).
func newCluster(top *topologies.Topology, hosts []*topologies.Node) *Cluster {
	c := &Cluster{Top: top, Hosts: hosts, dist: map[*topologies.Node][]int{}}
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

// AggregationSwitch returns the switch where a job on hosts aggregates: the
// switch closest to all of them (fewest hops to the farthest worker, then
// fewest hops in all, then the most aggregators, then the first in the
// topology). For a rack-local job it is the rack's ToR.
func (c *Cluster) AggregationSwitch(hosts []int) (*topologies.Node, error) {
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
		if best == nil || mx < bestMax || mx == bestMax && (sum < bestS || sum == bestS && sw.Aggregators > best.Aggregators) {
			best, bestMax, bestS = sw, mx, sum
		}
	}
	if best == nil {
		return nil, fmt.Errorf("no switch reaches every worker of the job")
	}
	return best, nil
}

// hop is one directed link traversal: the link and whether it goes from
// its A end to its B end.
type hop struct {
	link    *topologies.Link
	forward bool
	from    *topologies.Node
}

// path returns the hops of one shortest path from src to dst (lowest port
// first at each branch, as topologies.Path).
func (c *Cluster) path(src, dst *topologies.Node) []hop {
	d := c.distances(dst)
	var out []hop
	for n := src; n != dst; {
		var next *topologies.Port
		for _, p := range n.Ports {
			if m := p.Peer.Node; d[m.Index] == d[n.Index]-1 && (!m.IsHost() || m == dst) {
				next = p
				break
			}
		}
		if next == nil {
			return nil
		}
		out = append(out, hop{link: next.Link, forward: next.Link.A == next, from: n})
		n = next.Peer.Node
	}
	return out
}
