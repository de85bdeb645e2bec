package training

import (
	"math"
	"time"

	"github.com/tracebed/tracebed/systems/inasched"
	"github.com/tracebed/tracebed/topologies"
	"github.com/tracebed/tracebed/workloads/models"
)

// dirLink is the index of the directed link a hop uses in engine.links.
func dirLink(h hop) int {
	if h.forward {
		return 2 * h.link.Index
	}
	return 2*h.link.Index + 1
}

// pathLatency is the time a frame of frame bytes takes along hops:
// propagation and serialization on every hop, plus the pipeline latency of
// every switch it leaves except skip (the aggregation switch, counted once
// by the caller).
func pathLatency(hops []hop, frame int, skip *topologies.Node) float64 {
	var t float64
	for _, h := range hops {
		t += h.link.Delay.Seconds() + float64(frame)*8/float64(h.link.Rate)
		if !h.from.IsHost() && h.from != skip {
			t += h.from.Latency.Seconds()
		}
	}
	return t
}

func minRate(hops []hop) float64 {
	r := math.Inf(1)
	for _, h := range hops {
		r = min(r, float64(h.link.Rate))
	}
	return r
}

// linkCount counts a job's flows on each directed link.
type linkCount map[int]int

// bottleneck is the rate, bits/s, each of the flows gets when the job
// runs alone: the slowest link's rate divided by the job's flows on it.
func (c linkCount) bottleneck(links []*topologies.Link) float64 {
	r := math.Inf(1)
	for l, n := range c {
		r = min(r, float64(links[l/2].Rate)/float64(n))
	}
	return r
}

// derive computes a placed job's network constants and its scheduler
// view: the estimate every policy and both levels use (docs/dynaina.md,
// "Estimates from the topology"). For each worker: the path to the job's
// tree and back; in two-level aggregation a rack's workers share one
// partial stream between their ToR and the top switch. The bottleneck
// rate counts the job's own flows on every link (k workers behind one
// uplink share it); the round trip is the slowest worker's; the window is
// the bandwidth-delay product; the INA all-reduce time follows.
func (e *engine) derive(r *run) {
	net := e.s.Net
	P, F := float64(net.Payload), float64(net.Frame)
	f := F / P
	n := len(r.hosts)
	sw := r.sw
	var upMax, upMin, downMax float64
	upMin = math.Inf(1)
	rate := math.Inf(1)
	r.ina = r.ina[:0]
	inaCount := linkCount{}
	add := func(x hop) {
		r.ina = append(r.ina, coef{dirLink(x), f})
		inaCount[dirLink(x)]++
	}
	racks := make([]bool, len(r.tree.Lower))
	for i, h := range r.hosts {
		host := e.cl.Hosts[h]
		up, down := e.cl.path(host, sw), e.cl.path(sw, host)
		lu, ld := pathLatency(up, net.Frame, sw), pathLatency(down, net.Frame, sw)
		upMax, upMin, downMax = max(upMax, lu), min(upMin, lu), max(downMax, ld)
		rate = min(rate, minRate(up), minRate(down))
		k := -1
		if i < len(r.tree.Rack) {
			k = r.tree.Rack[i]
		}
		shared := k >= 0 && racks[k] // the rack's partial stream is counted
		for j, x := range up {
			if j == 0 || !shared {
				add(x)
			}
		}
		for j, x := range down {
			if j == len(down)-1 || !shared {
				add(x)
			}
		}
		if k >= 0 {
			racks[k] = true
		}
	}
	r.ina = mergeCoefs(r.ina)
	turn := net.Turnaround.Seconds()
	r.rtt = upMax + sw.Latency.Seconds() + downMax + turn
	lineRaw := inaCount.bottleneck(e.s.Top.Links)
	r.line = lineRaw / 8 / f
	r.hold = upMax - upMin

	// Host ring: worker i sends 2(N−1)/N of the gradient to worker i+1.
	r.ring = r.ring[:0]
	ringCount := linkCount{}
	var ringLat float64
	for i, h := range r.hosts {
		next := r.hosts[(i+1)%n]
		if n == 1 {
			break
		}
		p := e.cl.path(e.cl.Hosts[h], e.cl.Hosts[next])
		ringLat = max(ringLat, pathLatency(p, net.Frame, nil))
		for _, x := range p {
			r.ring = append(r.ring, coef{dirLink(x), 2 * float64(n-1) / float64(n) * f})
			ringCount[dirLink(x)]++
		}
	}
	r.ring = mergeCoefs(r.ring)
	r.tauRing = 2 * float64(n-1) * (ringLat + turn)
	ringRate := ringCount.bottleneck(e.s.Top.Links)

	// Shared mode: results and collisions go through the job's parameter
	// server, a dedicated host attached to the aggregation switch with a
	// link like worker 0's.
	acc := e.cl.Hosts[r.hosts[0]].Ports[0].Link
	psOne := acc.Delay.Seconds() + F*8/float64(acc.Rate)
	r.rttATP = r.rtt + 2*psOne + sw.Latency.Seconds() + turn
	r.psLinks = [2]int{len(e.links), len(e.links) + 1}
	e.links = append(e.links, float64(acc.Rate)/8, float64(acc.Rate)/8)
	r.wATP = int(math.Ceil(r.line * r.rttATP / P))
	if net.ATPHold == HoldReturn {
		// Held from the first contribution until the result is back from
		// the parameter server: the chunk's spread plus the switch → PS →
		// switch round trip.
		r.hold += r.rttATP - r.rtt
	}

	G := float64(r.prof.GradientBytes)
	demand := int(math.Ceil(r.line * r.rtt / P))
	commINA := G/r.line + r.rtt
	commRing := 0.0
	if n > 1 {
		commRing = 2*float64(n-1)/float64(n)*G*f/(ringRate/8) + r.tauRing
	}
	// Useful: the fewest aggregators with which INA beats the ring. Below
	// the window an all-reduce slows in proportion; the ring moves
	// 2(N−1)/N of the gradient at its own bottleneck rate. A job for which
	// INA at its full window is no faster than the ring never gets memory
	// (Useful > Demand).
	useful := demand
	if n > 1 {
		x := float64(demand) * float64(n) / float64(2*(n-1))
		if ringRate != lineRaw {
			x *= ringRate / lineRaw
		}
		useful = min(demand, int(math.Floor(x))+1)
		if commINA >= commRing {
			useful = demand + 1
		}
	}
	lower := make([]string, len(r.tree.Lower))
	for i, t := range r.tree.Lower {
		lower[i] = t.Name
	}
	if len(lower) == 0 {
		lower = nil
	}
	commPS := G/min(r.line, float64(r.wATP)*P/r.rttATP) + r.rttATP
	r.sj = inasched.Job{
		ID: r.spec.ID, Model: r.prof.Name, Workers: n, Switch: sw.Name, Lower: lower, Arrival: r.spec.Arrival,
		Compute:  secs(r.compute),
		Gradient: r.prof.GradientBytes,
		CommINA:  secs(commINA),
		CommRing: secs(commRing),
		Demand:   demand, Useful: useful,
		Latency: secs(r.rtt),
		CommPS:  secs(commPS), DemandPS: r.wATP, LatencyPS: secs(r.rttATP),
	}
	r.boundComm = 0
	if n > 1 {
		r.boundComm = G * 8 / rate
	}
}

func secs(s float64) time.Duration { return time.Duration(math.Round(s * 1e9)) }

// mergeCoefs adds up coefficients of the same link, keeping first-seen
// order.
func mergeCoefs(cs []coef) []coef {
	at := map[int]int{}
	out := cs[:0:0]
	for _, c := range cs {
		if i, ok := at[c.link]; ok {
			out[i].a += c.a
			continue
		}
		at[c.link] = len(out)
		out = append(out, c)
	}
	return out
}

// LineRateDemand is the aggregators a rack-local job on top needs to
// aggregate at line rate: the bandwidth-delay product, in INA packets, of
// the first host's path to its switch and back. SwitchML's default
// partition size.
func LineRateDemand(top *topologies.Topology, net Net) int {
	cl := NewCluster(top)
	if len(cl.Hosts) == 0 {
		return 1
	}
	h := cl.Hosts[0]
	sw := h.Uplink().Node
	up, down := cl.path(h, sw), cl.path(sw, h)
	rtt := pathLatency(up, net.Frame, sw) + sw.Latency.Seconds() + pathLatency(down, net.Frame, sw) + net.Turnaround.Seconds()
	line := min(minRate(up), minRate(down)) / 8 * float64(net.Payload) / float64(net.Frame)
	return max(1, int(math.Ceil(line*rtt/float64(net.Payload))))
}

// psRoundTrip returns the round trip of a shared-mode (ATP) chunk — worker,
// switch, parameter server, switch, workers — and the window that keeps
// it at line rate, for a job of n workers on the first hosts of top (of
// those named).
func psRoundTrip(top *topologies.Topology, hosts []string, net Net, n int) (float64, int) {
	var nodes []*topologies.Node
	for _, h := range hosts {
		nodes = append(nodes, top.Node(h))
	}
	cl := newCluster(top, nodes)
	e := &engine{s: Setup{Top: top, Net: net}, cl: cl}
	for _, l := range top.Links {
		e.links = append(e.links, float64(l.Rate)/8, float64(l.Rate)/8)
	}
	n = max(1, min(n, len(nodes)))
	r := &run{prof: models.Profile{GradientBytes: 1, Compute: time.Millisecond}}
	for i := range n {
		r.hosts = append(r.hosts, i)
	}
	t, err := cl.Tree(r.hosts)
	if err != nil {
		return 0, 1
	}
	r.sw, r.tree = t.Top, t
	e.derive(r)
	return r.rttATP, r.wATP
}
