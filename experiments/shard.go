package experiments

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Shard names one of Count disjoint parts of a spec's runs, numbered from 0.
// The zero Shard (Count 0) means every run.
type Shard struct {
	Index, Count int
}

// ParseShard reads "I/N" (0 ≤ I < N), the form of run --shard; Kubernetes
// Indexed Jobs and Slurm arrays number their tasks from 0 the same way.
func ParseShard(s string) (Shard, error) {
	i, n, ok := strings.Cut(s, "/")
	if !ok {
		return Shard{}, fmt.Errorf("shard %q: want I/N, e.g. 0/4 for the first of 4 shards", s)
	}
	idx, err1 := strconv.Atoi(strings.TrimSpace(i))
	cnt, err2 := strconv.Atoi(strings.TrimSpace(n))
	switch {
	case err1 != nil || err2 != nil:
		return Shard{}, fmt.Errorf("shard %q: want two whole numbers I/N, e.g. 0/4", s)
	case cnt < 1 || cnt > MaxShards:
		return Shard{}, fmt.Errorf("shard %q: %d shards; want 1 to %d", s, cnt, MaxShards)
	case idx < 0 || idx >= cnt:
		return Shard{}, fmt.Errorf("shard %q: index %d; want 0 to %d (shards are numbered from 0)", s, idx, cnt-1)
	}
	return Shard{Index: idx, Count: cnt}, nil
}

// MaxShards bounds the number of shards (Kubernetes allows 100,000
// completions per Indexed Job; Slurm's MaxArraySize defaults to 1001).
const MaxShards = 100000

func (s Shard) String() string { return fmt.Sprintf("%d/%d", s.Index, s.Count) }

// Coster is implemented by experiments that can estimate what a run costs,
// so that shards get equal shares of the work rather than equal numbers of
// runs. Estimates come from the compiled spec alone (scenario size, jobs,
// iterations, topology size), never from running; only their ratios within
// one spec matter. Cost must be deterministic: every shard computes the
// same plan on its own.
type Coster interface {
	Cost(r Run) float64
}

// Runs lists every (scenario, policy, seed) of spec in canonical order:
// scenarios and policies in spec order, then seeds.
func Runs(spec *Spec) []Run {
	var runs []Run
	for _, sc := range spec.Scenarios {
		for _, p := range spec.Policies {
			for _, seed := range spec.Seeds {
				runs = append(runs, Run{Policy: p.Name, Scenario: sc.Name, Seed: seed, Substrate: spec.Substrate, Scale: spec.Scale})
			}
		}
	}
	return runs
}

// Plan is an assignment of a spec's runs to shards.
type Plan struct {
	Runs  []Run     // every run, in canonical order
	Cost  []float64 // estimated cost of each run
	Shard []int     // the shard of each run
	Load  []float64 // estimated cost of each shard
}

// NewPlan splits the runs of spec into n shards of nearly equal estimated
// cost: runs are taken from the most to the least costly (ties in
// canonical order) and each goes to the shard with the least cost so far
// (ties to the lowest index) — the longest-processing-time rule, within
// 4/3 of the best possible makespan. The plan depends only on the spec and
// the estimates, so shards that run in separate processes, on separate
// machines, agree on it without talking to each other.
func NewPlan(spec *Spec, exp Experiment, n int) *Plan {
	p := &Plan{Runs: Runs(spec), Load: make([]float64, max(n, 1))}
	p.Cost = make([]float64, len(p.Runs))
	p.Shard = make([]int, len(p.Runs))
	c, _ := exp.(Coster)
	for i, r := range p.Runs {
		p.Cost[i] = 1
		if c != nil {
			// A broken estimate must not break the plan: the smallest
			// positive cost keeps the run in the plan, and every shard
			// computes the same value.
			if v := c.Cost(r); v > 0 && !math.IsInf(v, 0) {
				p.Cost[i] = v
			} else {
				p.Cost[i] = math.SmallestNonzeroFloat64
			}
		}
	}
	order := make([]int, len(p.Runs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(p.Cost[b], p.Cost[a]) })
	for _, i := range order {
		s := 0
		for j := range p.Load {
			if p.Load[j] < p.Load[s] {
				s = j
			}
		}
		p.Shard[i] = s
		p.Load[s] += p.Cost[i]
	}
	return p
}

// Of returns the runs of shard i, in canonical order.
func (p *Plan) Of(i int) []Run {
	var out []Run
	for k, r := range p.Runs {
		if p.Shard[k] == i {
			out = append(out, r)
		}
	}
	return out
}

// Total is the estimated cost of every run.
func (p *Plan) Total() float64 {
	var t float64
	for _, c := range p.Cost {
		t += c
	}
	return t
}

// Imbalance is the most loaded shard's estimated cost over the mean: 1 is
// a perfect split; a sweep on n machines takes about Imbalance times as long
// as a perfect split would.
func (p *Plan) Imbalance() float64 {
	total := p.Total()
	if total == 0 {
		return 1
	}
	return slices.Max(p.Load) / (total / float64(len(p.Load)))
}
