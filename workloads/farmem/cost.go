package farmem

import "github.com/tracebed/tracebed/experiments"

// Cost implements experiments.Coster: an estimate of a run's work, so that
// sharded sweeps split evenly (docs/scale-out.md). Every page access of
// every host is an event of its application, and the share of accesses
// beyond local memory adds a fetch and an eviction, each a few packets
// through the switches: the cost is Σ accesses × (1 + faultWeight ×
// (1 − local_memory)). The policy is left out. This is a weak estimate
// (on glitter-100g its correlation with run times is about 0.4): how many
// accesses fault depends on each application's locality, and the
// background traffic's events on how long the run lasts, which only
// running tells.
func (e *experiment) Cost(r experiments.Run) float64 {
	sc := e.scenarios[r.Scenario]
	if sc == nil {
		return 1
	}
	var ops float64
	for _, n := range sc.ops {
		ops += float64(n)
	}
	return max(1, ops*(1+faultWeight*(1-sc.p.LocalMemory)))
}

// faultWeight is the cost of a fault and its eviction against a hit.
const faultWeight = 8
