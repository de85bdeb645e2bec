package training

import (
	"math"

	"github.com/tracebed/tracebed/experiments"
	"github.com/tracebed/tracebed/traces/models"
)

// Cost implements experiments.Coster: an estimate of a run's work from its
// jobs (the trace, or the generated trace of the run's seed), its policy
// and its compute scale, so that sharded sweeps split evenly
// (docs/scale-out.md).
//
// At flow level the model handles a few events per job iteration, and
// after each recomputes the max-min shares of the jobs running then: the
// cost is the job iterations times the jobs that may run at once (jobs
// whose workers fit on the hosts together, at most all of them), times
// the policy's weight (systemCost), divided by √compute_scale (faster
// GPUs make communication phases overlap more, and every overlap is more
// reallocation). At packet level every INA packet is an event at each hop:
// the cost is the packets, Σ iterations × workers × ⌈gradient ÷ scale ÷
// payload⌉, times the policy's weight.
func (e *experiment) Cost(r experiments.Run) float64 {
	sc := e.scenarios[r.Scenario]
	if sc == nil {
		return 1
	}
	js, err := sc.Jobs(r.Seed)
	if err != nil || len(js) == 0 {
		return 1
	}
	var iters, packets, workers float64
	for _, j := range js {
		iters += float64(j.Iterations)
		workers += float64(j.Workers)
		prof, ok := models.Lookup(j.Model)
		if !ok {
			continue
		}
		per := math.Ceil(float64(prof.GradientBytes) / e.scale / float64(sc.net.Payload))
		packets += float64(j.Iterations) * float64(j.Workers) * per
	}
	w := systemCost[e.systems[r.Policy]]
	if w == 0 {
		w = 1
	}
	if sc.p.Granularity == GranularityPacket {
		return packets * w
	}
	meanWorkers := workers / float64(len(js))
	concurrent := min(float64(len(js)), math.Max(1, float64(len(sc.top.Hosts()))/meanWorkers))
	return iters * concurrent * w / math.Sqrt(sc.net.ComputeScale)
}

// systemCost weighs the policies' work relative to host all-reduce:
// measured on the runs of dynaina-100g and dynaina-sweep (ATP's hashed
// shared pool and its collisions cost the most, DynaINA's pool changes
// next).
var systemCost = map[string]float64{"noina": 1, "switchml": 1.3, "dynaina": 1.6, "atp": 4}
