package fabric

import (
	"math"
	"time"

	"github.com/tracebed/tracebed/p4/ina"
	"github.com/tracebed/tracebed/systems/inasched"
	"github.com/tracebed/tracebed/topologies"
	jobtrace "github.com/tracebed/tracebed/traces/jobs"
	"github.com/tracebed/tracebed/traces/models"
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

// Coef is one directed link an all-reduce loads: Link indexes the
// directed links (2 × topology link index, +1 for the B→A direction), A
// is the wire bytes it carries per gradient byte of the job's progress.
type Coef struct {
	Link int
	A    float64
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

// Estimate is what the fabric gives a placed job: the scheduler's view
// (Job: the all-reduce times in pool and shared mode and on the ring, the
// windows, the break-even pool size) and the flow model's link
// coefficients and latencies. Every policy, the flow model and the
// packet-level controller use the same estimate.
type Estimate struct {
	Job inasched.Job
	// INA and Ring are the directed links a pool-mode all-reduce and a ring
	// all-reduce load, with the wire bytes per gradient byte of progress.
	INA, Ring []Coef
	// RTT is a pool-mode slot's round trip; RTTPS a shared-mode chunk's,
	// through the parameter server; TauRing the ring's latency term.
	RTT, RTTPS, TauRing float64 // seconds
	// Hold is the spread of a chunk's packets at the switch (shared mode:
	// how long a chunk holds its aggregator beyond its own round trip).
	Hold float64
	// Line is the payload bytes/s per worker at the job's bottleneck.
	Line float64
	// WindowPS is ATP's window (the line-rate window of RTTPS).
	WindowPS int
	// PSRate is the bytes/s of each direction of the parameter server's
	// link (a dedicated host at the top switch, with a link like worker
	// 0's).
	PSRate float64
	// BoundComm is the gradient's bits over the workers' slowest link:
	// the physical lower bound of an all-reduce, seconds.
	BoundComm float64
	// FreeINA (rdma.go): the links of the INA path (RC connections
	// between the workers through the aggregation switch) and of the PS
	// path (the workers' links; the parameter server's carries PSPathA
	// wire bytes per gradient byte of a worker's progress), the INA
	// path's round trip and its payload bytes/s per worker at its
	// bottleneck, the PS path's latency.
	RDMA, PSPath            []Coef
	RTTRDMA, TauPS, PSPathA float64
	LineRDMA                float64
}

// Estimate computes a placed job's estimate (docs/dynaina.md, "Estimates
// from the topology"): job runs on hosts (indices in c.Hosts) with tree,
// profile prof and compute seconds per iteration. For each worker: the
// path to the job's tree and back; in two-level aggregation a rack's
// workers share one partial stream between their ToR and the top switch.
// The bottleneck rate counts the job's own flows on every link (k workers
// behind one uplink share it); the round trip is the slowest worker's;
// the window is the bandwidth-delay product; the INA all-reduce time
// follows.
func (c *Cluster) Estimate(net Net, job jobtrace.Job, prof models.Profile, compute float64, hosts []int, tree Tree) Estimate {
	var r Estimate
	P, F := float64(net.Payload), float64(net.Frame)
	f := F / P
	n := len(hosts)
	sw := tree.Top
	var upMax, upMin, downMax float64
	upMin = math.Inf(1)
	rate := math.Inf(1)
	r.INA = r.INA[:0]
	inaCount := linkCount{}
	add := func(x hop) {
		r.INA = append(r.INA, Coef{dirLink(x), f})
		inaCount[dirLink(x)]++
	}
	racks := make([]bool, len(tree.Lower))
	for i, h := range hosts {
		host := c.Hosts[h]
		k := -1
		if i < len(tree.Rack) {
			k = tree.Rack[i]
		}
		up, down := c.inaPaths(host, sw, k, tree)
		lu, ld := pathLatency(up, net.Frame, sw), pathLatency(down, net.Frame, sw)
		upMax, upMin, downMax = max(upMax, lu), min(upMin, lu), max(downMax, ld)
		rate = min(rate, minRate(up), minRate(down))
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
	r.INA = mergeCoefs(r.INA)
	turn := net.Turnaround.Seconds()
	r.RTT = upMax + sw.Latency.Seconds() + downMax + turn
	lineRaw := inaCount.bottleneck(c.Top.Links)
	r.Line = lineRaw / 8 / f
	r.Hold = upMax - upMin

	// Host ring: worker i sends 2(N−1)/N of the gradient to worker i+1.
	r.Ring = r.Ring[:0]
	ringCount := linkCount{}
	var ringLat float64
	for i, h := range hosts {
		next := hosts[(i+1)%n]
		if n == 1 {
			break
		}
		p := c.path(c.Hosts[h], c.Hosts[next], flow{NodePort, NodePort}, false)
		ringLat = max(ringLat, pathLatency(p, net.Frame, nil))
		for _, x := range p {
			r.Ring = append(r.Ring, Coef{dirLink(x), 2 * float64(n-1) / float64(n) * f})
			ringCount[dirLink(x)]++
		}
	}
	r.Ring = mergeCoefs(r.Ring)
	r.TauRing = 2 * float64(n-1) * (ringLat + turn)
	ringRate := ringCount.bottleneck(c.Top.Links)

	// Shared mode: results and collisions go through the job's parameter
	// server, a dedicated host attached to the aggregation switch with a
	// link like worker 0's.
	acc := c.Hosts[hosts[0]].Ports[0].Link
	psOne := acc.Delay.Seconds() + F*8/float64(acc.Rate)
	r.RTTPS = r.RTT + 2*psOne + sw.Latency.Seconds() + turn
	r.PSRate = float64(acc.Rate) / 8
	r.WindowPS = int(math.Ceil(r.Line * r.RTTPS / P))
	if net.ATPHold == HoldReturn {
		// Held from the first contribution until the result is back from
		// the parameter server: the chunk's spread plus the switch → PS →
		// switch round trip.
		r.Hold += r.RTTPS - r.RTT
	}

	G := float64(prof.GradientBytes)
	demand := int(math.Ceil(r.Line * r.RTT / P))
	commINA := G/r.Line + r.RTT
	commRing := 0.0
	if n > 1 {
		commRing = 2*float64(n-1)/float64(n)*G*f/(ringRate/8) + r.TauRing
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
	lower := make([]string, len(tree.Lower))
	for i, t := range tree.Lower {
		lower[i] = t.Name
	}
	if len(lower) == 0 {
		lower = nil
	}
	commPS := G/min(r.Line, float64(r.WindowPS)*P/r.RTTPS) + r.RTTPS
	r.Job = inasched.Job{
		ID: job.ID, Model: prof.Name, Workers: n, Switch: sw.Name, Lower: lower, Arrival: job.Arrival,
		Compute:  Secs(compute),
		Gradient: prof.GradientBytes,
		CommINA:  Secs(commINA),
		CommRing: Secs(commRing),
		Demand:   demand, Useful: useful,
		Latency: Secs(r.RTT),
		CommPS:  Secs(commPS), DemandPS: r.WindowPS, LatencyPS: Secs(r.RTTPS),
	}
	r.BoundComm = 0
	if n > 1 {
		r.BoundComm = G * 8 / rate
	}
	c.estimateRDMA(net, &r, hosts, sw, G)
	return r
}

// inaPaths returns the hops of a worker's INA packets to the top of its
// job's tree and of the results back, as the data plane sends them: data
// from the worker's agent to the top switch, or, in two-level aggregation
// (rack k of tree, k ≥ 0), to its ToR and the rack's partial on to the
// top; results multicast from the top (through the ToR) to the worker.
func (c *Cluster) inaPaths(host, top *topologies.Node, k int, tree Tree) (up, down []hop) {
	if k < 0 {
		return c.path(host, top, flow{NodePort, ina.Port}, false), c.path(top, host, flow{ina.Port, NodePort}, true)
	}
	tor := tree.Lower[k]
	up = append(c.path(host, tor, flow{NodePort, ina.Port}, false), c.path(tor, top, flow{ina.Port, ina.Port}, false)...)
	down = append(c.path(top, tor, flow{ina.Port, ina.Port}, true), c.path(tor, host, flow{ina.Port, NodePort}, true)...)
	return up, down
}

// Secs converts seconds to a duration, rounded to the nanosecond.
func Secs(s float64) time.Duration { return time.Duration(math.Round(s * 1e9)) }

// mergeCoefs adds up coefficients of the same link, keeping first-seen
// order.
func mergeCoefs(cs []Coef) []Coef {
	at := map[int]int{}
	out := cs[:0:0]
	for _, c := range cs {
		if i, ok := at[c.Link]; ok {
			out[i].A += c.A
			continue
		}
		at[c.Link] = len(out)
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
	up, down := cl.inaPaths(h, sw, -1, Tree{})
	rtt := pathLatency(up, net.Frame, sw) + sw.Latency.Seconds() + pathLatency(down, net.Frame, sw) + net.Turnaround.Seconds()
	line := min(minRate(up), minRate(down)) / 8 * float64(net.Payload) / float64(net.Frame)
	return max(1, int(math.Ceil(line*rtt/float64(net.Payload))))
}

// PSRoundTrip returns the round trip of a shared-mode (ATP) chunk —
// worker, switch, parameter server, switch, workers — and the window that
// keeps it at line rate, for a job of n workers on the first of the named
// hosts of top.
func PSRoundTrip(top *topologies.Topology, hosts []string, net Net, n int) (float64, int) {
	var nodes []*topologies.Node
	for _, h := range hosts {
		nodes = append(nodes, top.Node(h))
	}
	cl := NewClusterOf(top, nodes)
	n = max(1, min(n, len(nodes)))
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	t, err := cl.Tree(idx)
	if err != nil {
		return 0, 1
	}
	e := cl.Estimate(net, jobtrace.Job{}, models.Profile{GradientBytes: 1, Compute: time.Millisecond}, 0.001, idx, t)
	return e.RTTPS, e.WindowPS
}
