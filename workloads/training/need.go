package training

import (
	"math"

	"github.com/tracebed/tracebed/experiments"
	"github.com/tracebed/tracebed/p4/ina"
	"github.com/tracebed/tracebed/traces/models"
)

// Memory of an INA run, per item:
//   - an aggregator of the INA data plane (p4/ina): two cells of k int32
//     values and their registers; a switch's tables and counters besides;
//   - a job's state in the flow model or the agents, its results and its
//     series; a host's node and agents;
//   - a frame in flight besides its bytes (packet level).
const (
	aggregatorBytes = 2 * (4*ina.DefaultK + 32)
	switchBytes     = 512 << 10
	jobBytes        = 16 << 10
	hostBytes       = 16 << 10
	frameOverhead   = 320
	// Events: the flow model handles a few events per job iteration; at
	// packet level each INA packet is an event at each end and hop.
	eventsByIteration = 4
	eventsByPacket    = 6
	// The flow model records the switch memory in use at every change,
	// about twice per iteration, for the exact mem_util series: 16 bytes
	// each, in a slice that grows by doubling. (Records proportional to
	// the work: estimated, not bounded; docs/reliability.md.)
	stepBytesByIteration = 2 * 16 * 2
)

// Need implements experiments.Estimator: the switches' aggregator memory
// (each INA pipeline allocates its registers whole), the jobs and hosts,
// and at packet level what the switches' queues can hold; events from the
// jobs' iterations (flow) or packets (packet), over the spec's seeds.
func (e *experiment) Need(name string) experiments.Need {
	sc := e.scenarios[name]
	top := sc.top
	if sc.scaled != nil {
		top = sc.scaled.Top
	}
	mem := float64(len(top.Hosts())) * hostBytes
	var aggregators float64
	for _, sw := range top.Switches() {
		mem += switchBytes
		aggregators += float64(sw.Aggregators)
	}
	mem += aggregators * aggregatorBytes
	if sc.scaled != nil {
		mem += float64(top.QueueCapacity()) * 1.3 // frames and their overhead
	}
	var events, jobs, steps float64
	for _, seed := range e.spec.Seeds {
		js, err := sc.Jobs(seed)
		if err != nil {
			continue
		}
		jobs = max(jobs, float64(len(js)))
		var ev, st float64
		for _, j := range js {
			if sc.scaled == nil {
				ev += float64(j.Iterations) * eventsByIteration
				st += float64(j.Iterations) * stepBytesByIteration
				continue
			}
			prof, ok := models.Lookup(j.Model)
			if !ok {
				continue
			}
			per := math.Ceil(float64(prof.GradientBytes) / e.scale / float64(sc.net.Payload))
			ev += float64(j.Iterations) * float64(j.Workers) * per * 2 * eventsByPacket
		}
		events, steps = max(events, ev), max(steps, st)
	}
	work := jobs*(jobBytes+float64(sc.p.Bins)*16) + steps
	entry := e.entries[name]
	eventsKey := "jobs"
	switch {
	case len(sc.p.JobList) > 0:
		eventsKey = "job_list"
	case sc.jobs != nil:
		eventsKey = "trace"
	}
	const memWhat = "the switches' aggregator registers, the jobs and the hosts"
	memBy := experiments.EntryCause(e.spec, entry, "aggregators", memWhat)
	switch {
	case work > mem:
		// The jobs' records, not the network, drive it.
		memBy = experiments.EntryCause(e.spec, entry, eventsKey, "the jobs' records: their switch memory series grows with their iterations")
	case sc.p.Aggregators == nil:
		memBy = experiments.Cause{Pos: e.spec.At.At("topology"), Field: "topology", What: memWhat}
	}
	mem += work
	return experiments.Need{
		Memory:   int64(math.Min(mem, math.MaxInt64/2)),
		Events:   events,
		MemoryBy: memBy,
		EventsBy: experiments.EntryCause(e.spec, entry, eventsKey, "the jobs' iterations"),
	}
}
