package incast

import "github.com/tracebed/tracebed/experiments"

// Cost implements experiments.Coster: the frames the senders send, each a
// few events (docs/scale-out.md).
func (e *experiment) Cost(r experiments.Run) float64 {
	p, ok := e.scenarios[r.Scenario]
	if !ok {
		return 1
	}
	return float64(p.Senders) * float64(p.Packets)
}
