package farmem

import (
	"math"
	"time"

	"github.com/tracebed/tracebed/analysis"
	"github.com/tracebed/tracebed/experiments"
	"github.com/tracebed/tracebed/systems/fastswap"
	"github.com/tracebed/tracebed/workloads/farmem/paging"
)

// Memory of a far-memory run, per item (workloads/farmem/paging,
// emulator/sim), measured against the soak test's peaks:
//   - a host's page table entry and its application's page permutation;
//   - a stored page's entry on its server (the data is a page more);
//   - a frame in flight besides its bytes (Packet, event, queue slot; the
//     allocator's size classes add up to a quarter of the bytes);
//   - what a host holds whatever its size (its trace reader's buffers,
//     its engine, its agent and node).
const (
	pageEntry     = 48
	storedEntry   = 40
	frameOverhead = 320
	hostFixed     = 512 << 10
	// eventsByAccess is about how many simulation events an access
	// costs, faults and write-backs included.
	eventsByAccess = 3
)

// Need implements experiments.Estimator: every host's page table and
// records, every page's copy on its server, what the network's queues can
// hold (each switch egress queue up to its buffer), the bulk senders'
// backlogs, and the events of every access and of the background traffic
// over the run.
func (e *experiment) Need(name string) experiments.Need {
	sc := e.scenarios[name]
	ps := float64(sc.pageSize)
	var mem, events, longest float64
	inflight := float64(fastswap.Scaled(fastswap.MaxReclaimOffload, sc.p.MemoryScale)+256) * (1.25*ps + frameOverhead)
	for i := range sc.hosts {
		pages, ops := float64(sc.pages[i]), float64(sc.ops[i])
		mem += hostFixed + pages*pageEntry + pages*(1.25*ps+storedEntry) + inflight
		mem += float64(analysis.DurationsBytes(int(math.Min(ops, analysis.MaxExactDurations+1)), 0))
		mem += math.Min(ops, paging.MaxBlockEvents) * 2 * 24
		events += ops * eventsByAccess
		// The run lasts the compute, at least, and every access a fault
		// that waits its round trip and page (a few µs on fast links) at
		// most: a bound for the background traffic below.
		least, _ := sc.faultTime(sc.hosts[i])
		longest = max(longest, sc.compute[i].Seconds()+ops*max(4e-6, least.Seconds()))
	}
	// Where the links make faults slow, checkDuration's rough estimate
	// (from the replay), up to the run limit.
	longest = min(max(longest, sc.rough.Seconds()), runLimit.Seconds())
	mem += float64(sc.top.QueueCapacity()) * 1.3 // frames and their overhead
	if bg := sc.p.Background; bg.Load > 0 {
		for _, name := range sc.senders {
			rate := sc.top.Node(name).Ports[0].Link.Rate
			burst := sc.stretch(time.Duration(bg.Burst))
			mem += bulkBacklog(burst, rate, bg.Frame) * (1.25*float64(bg.Frame) + frameOverhead)
			// At most line rate for the whole run, four events a frame
			// (sent, serialized, switched, received).
			events += float64(rate) / (8 * float64(bg.Frame)) * longest * sc.scale * 4
		}
	}
	entry := e.entries[name]
	memKey, eventsKey := "memory_scale", "iterations"
	for _, t := range sc.traces {
		if t != nil {
			memKey, eventsKey = "trace", "trace" // traces are not scaled
			if len(sc.p.Traces) > 0 {
				memKey, eventsKey = "traces", "traces"
			}
		}
	}
	return experiments.Need{
		Memory:   int64(math.Min(mem, math.MaxInt64/2)),
		Events:   events,
		MemoryBy: experiments.EntryCause(e.spec, entry, memKey, "the hosts' working sets, their pages on the servers and the switches' buffers"),
		EventsBy: experiments.EntryCause(e.spec, entry, eventsKey, "the applications' page accesses and the background traffic"),
	}
}
