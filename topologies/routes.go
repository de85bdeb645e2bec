package topologies

import (
	"net/netip"
	"slices"
)

// RouteTable maps a destination address to the ports that lie on a shortest
// path towards it, in ascending port order. A switch spreads flows over them
// by flow hash (ECMP).
type RouteTable map[netip.Addr][]int

// Routes computes every switch's route table: for each host and each switch
// address, the next-hop ports on the shortest paths (in hops). Hosts never
// forward, so paths only cross switches. The result is deterministic.
func (t *Topology) Routes() map[string]RouteTable {
	out := make(map[string]RouteTable)
	for _, s := range t.Switches() {
		out[s.Name] = RouteTable{}
	}
	for _, dst := range t.Nodes {
		dist := t.distances(dst)
		for _, s := range t.Switches() {
			if s == dst || dist[s.Index] < 0 {
				continue
			}
			var ports []int
			for _, p := range s.Ports {
				if d := dist[p.Peer.Node.Index]; d >= 0 && d == dist[s.Index]-1 {
					ports = append(ports, p.Num)
				}
			}
			slices.Sort(ports)
			out[s.Name][dst.IP] = ports
		}
	}
	return out
}

// distances returns the hop count from every node to dst (-1: unreachable),
// by breadth-first search that does not pass through hosts other than dst.
func (t *Topology) distances(dst *Node) []int {
	dist := make([]int, len(t.Nodes))
	for i := range dist {
		dist[i] = -1
	}
	dist[dst.Index] = 0
	queue := []*Node{dst}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		if n.IsHost() && n != dst {
			continue // a host is reached but never forwards
		}
		for _, p := range n.Ports {
			m := p.Peer.Node
			if dist[m.Index] < 0 {
				dist[m.Index] = dist[n.Index] + 1
				queue = append(queue, m)
			}
		}
	}
	return dist
}

// Path returns one shortest path of nodes from src to dst, choosing the
// lowest-numbered port at each branch (for hop counts and explanations).
func (t *Topology) Path(src, dst *Node) []*Node {
	dist := t.distances(dst)
	if dist[src.Index] < 0 {
		return nil
	}
	path := []*Node{src}
	for n := src; n != dst; {
		next := (*Node)(nil)
		for _, p := range n.Ports {
			if m := p.Peer.Node; dist[m.Index] == dist[n.Index]-1 && (!m.IsHost() || m == dst) {
				next = m
				break
			}
		}
		if next == nil {
			return nil
		}
		path = append(path, next)
		n = next
	}
	return path
}
