package fabric

import (
	"math"

	"github.com/tracebed/tracebed/emulator/roce/wire"
	"github.com/tracebed/tracebed/topologies"
)

// The wire of FreeINA's two paths (docs/freeina.md §5): RoCEv2 reliable
// connections, every frame counted as the simulation serializes it
// (Ethernet header to ICRC).
const (
	// RDMAHeader is the headers of an INA-path packet, an RDMA WRITE only
	// with immediate: Ethernet 14, IPv4 20, UDP 8, BTH 12, RETH 16,
	// ImmDt 4, ICRC 4.
	RDMAHeader = 78
	// RDMAAck is an acknowledgement: Ethernet, IPv4, UDP, BTH, AETH 4,
	// ICRC.
	RDMAAck = 62
	// PSMTU is the path MTU of the PS path's connections (nothing on it
	// is aggregated in a switch, so it uses the RNIC's largest).
	PSMTU = 4096
	// PSMiddle is the headers of a PS-path packet in the middle of a
	// message: Ethernet, IPv4, UDP, BTH, ICRC.
	PSMiddle = 58
	// PSAckEvery is how many packets of a message the RNIC sends per
	// acknowledgement request (roce.DefaultAckEvery).
	PSAckEvery = 16
	// AggregatorBytes is the topology's aggregator: 64 int32 values, the
	// unit a switch's `aggregators` counts (SwitchML's 256-byte slot).
	AggregatorBytes = 256
)

// DefaultRDMAPayload is the values an INA-path packet carries: 256 int32,
// a RoCE path MTU of 1024.
const DefaultRDMAPayload = 1024

// RDMACoef is the wire bytes an INA-path all-reduce moves on each of a
// worker's links per gradient byte: its own chunk (or the aggregate
// coming back) and the acknowledgement of the other direction's.
func RDMACoef(payload int) float64 {
	return float64(payload+RDMAHeader+RDMAAck) / float64(payload)
}

// PSCoef is the wire bytes the PS path moves per gradient byte on a
// worker's link (and, n-fold, on the parameter server's): full packets,
// a middle packet's headers each, an acknowledgement every PSAckEvery.
func PSCoef() float64 {
	return (PSMTU + PSMiddle + float64(RDMAAck)/PSAckEvery) / PSMTU
}

// estimateRDMA fills the FreeINA part of a job's estimate: the INA path
// (each worker's path to the aggregation switch sw and back, one RoCE
// frame and one acknowledgement per chunk each way) and the PS path
// (the same paths at the PS path's coefficient, the parameter server's
// link n-fold), their round trips, windows and all-reduce times, and the
// break-even memory. G is the gradient, n the workers.
func (c *Cluster) estimateRDMA(net Net, r *Estimate, hosts []int, sw *topologies.Node, G float64) {
	P := float64(net.RDMAPayload)
	if P <= 0 {
		P = DefaultRDMAPayload
	}
	a := RDMACoef(int(P))
	frame := int(P) + RDMAHeader
	aps := PSCoef()
	psFrame := PSMTU + PSMiddle
	count := linkCount{}
	var upMax, downMax, psUp, psDown float64
	r.RDMA, r.PSPath = r.RDMA[:0], r.PSPath[:0]
	psRate := math.Inf(1)
	for _, h := range hosts {
		host := c.Hosts[h]
		// RoCEv2 frames of both paths: UDP 4791 both ways, as the
		// packet-level hosts send them (p4/freeina's links).
		up, down := c.path(host, sw, flow{wire.Port, wire.Port}, false), c.path(sw, host, flow{wire.Port, wire.Port}, false)
		upMax = max(upMax, pathLatency(up, frame, sw))
		downMax = max(downMax, pathLatency(down, frame, sw))
		psUp = max(psUp, pathLatency(up, psFrame, sw))
		psDown = max(psDown, pathLatency(down, psFrame, sw))
		psRate = min(psRate, minRate(up), minRate(down))
		for _, x := range append(up, down...) {
			r.RDMA = append(r.RDMA, Coef{dirLink(x), a})
			r.PSPath = append(r.PSPath, Coef{dirLink(x), aps})
			count[dirLink(x)]++
		}
	}
	r.RDMA, r.PSPath = mergeCoefs(r.RDMA), mergeCoefs(r.PSPath)
	n := float64(len(hosts))
	turn := net.Turnaround.Seconds()
	r.RTTRDMA = upMax + sw.Latency.Seconds() + downMax + turn
	line := count.bottleneck(c.Top.Links) / 8 / a
	slot := max(1, int(P)/AggregatorBytes)
	demand := int(math.Ceil(line*r.RTTRDMA/P)) * slot
	comm := G/line + r.RTTRDMA

	// The PS path: the parameter server (a dedicated host at sw with a
	// link like worker 0's) receives every worker's gradient and sends
	// every worker the sum; a chunk's round trip goes through it.
	acc := c.Hosts[hosts[0]].Ports[0].Link
	psOne := acc.Delay.Seconds() + float64(psFrame)*8/float64(acc.Rate)
	r.TauPS = psUp + 2*sw.Latency.Seconds() + 2*psOne + psDown + 2*turn
	r.PSPathA = n * aps
	rate := min(psRate/8/aps, r.PSRate/(n*aps))
	commPS := G/rate + r.TauPS

	// UsefulRDMA: the fewest aggregators (whole slots) with which the INA
	// path beats the PS path; above the window when it never does.
	useful := demand + 1
	if comm < commPS {
		need := (comm - r.RTTRDMA) * float64(demand) / (commPS - r.RTTRDMA)
		useful = min(demand, (int(math.Floor(need))/slot+1)*slot)
	}
	j := &r.Job
	j.CommRDMA, j.LatencyRDMA, j.CommPSPath = Secs(comm), Secs(r.RTTRDMA), Secs(commPS)
	j.DemandRDMA, j.UsefulRDMA, j.SlotRDMA = demand, useful, slot
	r.LineRDMA = line
}
