package incast

import (
	"math"
	"time"

	"github.com/tracebed/tracebed/analysis"
	"github.com/tracebed/tracebed/experiments"
	"github.com/tracebed/tracebed/internal/units"
)

// Per-frame and per-host memory of the simulation (emulator/sim): a frame
// in flight is its bytes (in the allocator's size class, up to a quarter
// more), a Packet, an event and its slot in a queue; a host its node,
// port, queues, agent and random source. Measured (peak live heap against
// the estimate) by the soak test.
const (
	frameOverhead = 320
	hostBytes     = 16 << 10
	eventsByFrame = 4 // sent, serialized, switched, received
)

// need estimates what a run of p under any policy needs: the frames in
// flight (the switch's egress buffer towards the receiver, the largest
// of the policies', plus what the links hold: rate × delay each), the
// hosts, and the latency record, which stops growing at
// analysis.MaxExactDurations frames.
func (e *experiment) need(p Params, buffer units.Bytes) (mem int64, events float64) {
	frames := float64(p.Senders) * float64(p.Packets)
	size := float64(p.Size)
	onWire := math.Ceil(float64(p.Rate)*time.Duration(p.Delay).Seconds()/(8*size)) + 2 // per link
	inFlight := math.Min(frames, float64(buffer)/size+1+float64(p.Senders+1)*onWire+2*float64(p.Senders))
	m := inFlight*(1.25*size+frameOverhead) + float64(p.Senders+2)*hostBytes
	m += float64(analysis.DurationsBytes(int(math.Min(frames, analysis.MaxExactDurations+1)), 0))
	return int64(math.Min(m, math.MaxInt64/2)), frames * eventsByFrame
}

// Need implements experiments.Estimator.
func (e *experiment) Need(scenario string) experiments.Need {
	p := e.scenarios[scenario]
	var buffer units.Bytes
	for _, pol := range e.policies {
		buffer = max(buffer, pol.Buffer)
	}
	mem, events := e.need(p, buffer)
	sc := e.entries[scenario]
	return experiments.Need{
		Memory: mem, Events: events,
		MemoryBy: experiments.EntryCause(e.spec, sc, "packets", "frames in flight and one latency each, up to a bound"),
		EventsBy: experiments.EntryCause(e.spec, sc, "packets", "senders × packets frames, a few events each"),
	}
}
