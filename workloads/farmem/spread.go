package farmem

import (
	"fmt"
	"slices"
)

// bulkPlan is how the bulk tenant's senders offer its load: each sender's
// share of its line rate and, per memory server, the fraction of its
// bursts that go there.
type bulkPlan struct {
	share   []float64   // per sender: the fraction of time it is ON
	weights [][]float64 // per sender, per server: the share of its bursts
}

// spreadBulk spreads the bulk tenant's offered load over the servers: each
// server s gets load × servers[s] bits per second (its link's rate), whatever
// the number of senders. The servers' demands are laid end to end and cut
// into equal segments, one per sender, so every sender carries the same
// traffic and sends each server the part of its segment that falls there.
// The segments are taken in the order sender 0, S, 2S, …, 1, S+1, … (S
// servers), so that when the senders are a multiple of the servers sender i
// sends to server i mod S alone, as the bulk tenant always did. It fails if
// the senders' links cannot carry the load.
func spreadBulk(load float64, servers, senders []float64) (bulkPlan, error) {
	S, n := len(servers), len(senders)
	if S == 0 || n == 0 {
		return bulkPlan{}, fmt.Errorf("bulk traffic needs servers and senders")
	}
	var demand, capacity float64
	for _, r := range servers {
		demand += load * r
	}
	for _, r := range senders {
		capacity += r
	}
	if demand > capacity*(1+1e-12) {
		return bulkPlan{}, fmt.Errorf("load %v on %d server link(s) is %.4g bit/s; %d sender(s) can offer at most %.4g: lower the load to %.4g or add senders",
			load, S, demand, n, capacity, load*capacity/demand)
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		if a%S != b%S {
			return a%S - b%S
		}
		return a/S - b/S
	})
	seg := demand / float64(n)
	p := bulkPlan{share: make([]float64, n), weights: make([][]float64, n)}
	// Server s covers [start[s], start[s]+load×rate) of the line.
	start := make([]float64, S+1)
	for s, r := range servers {
		start[s+1] = start[s] + load*r
	}
	for k, i := range order {
		lo, hi := float64(k)*seg, float64(k+1)*seg
		w := make([]float64, S)
		for s := range S {
			if o := min(hi, start[s+1]) - max(lo, start[s]); o > seg*1e-9 {
				w[s] = o / seg
			}
		}
		p.weights[i] = w
		p.share[i] = min(1, seg/senders[i])
	}
	return p, nil
}

// picker chooses the destination of each burst by smooth weighted round
// robin (as nginx balances upstreams): deterministic, no random draws, and
// every prefix of the sequence close to the weights.
type picker struct {
	w, cur []float64
}

func newPicker(weights []float64) *picker {
	return &picker{w: weights, cur: make([]float64, len(weights))}
}

// next returns the index of the next destination.
func (p *picker) next() int {
	best, total := -1, 0.0
	for i, w := range p.w {
		if w <= 0 {
			continue
		}
		p.cur[i] += w
		total += w
		if best < 0 || p.cur[i] > p.cur[best] {
			best = i
		}
	}
	p.cur[best] -= total
	return best
}

// bulkPlan spreads the scenario's background load over its memory servers'
// links (spreadBulk).
func (s *scenario) bulkPlan() (bulkPlan, error) {
	rates := func(names []string) []float64 {
		out := make([]float64, len(names))
		for i, n := range names {
			out[i] = float64(s.top.Node(n).Ports[0].Link.Rate)
		}
		return out
	}
	return spreadBulk(s.p.Background.Load, rates(s.servers), rates(s.senders))
}
