package allreduce

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tracebed/tracebed/emulator/sim"
	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/p4/ina"
	"github.com/tracebed/tracebed/topologies"
)

type netParams struct {
	hosts              int
	rate               units.Rate
	delay              time.Duration
	aggregators        int
	loss, dup, reorder float64
	buffer             units.Bytes
}

func starTopo(t testing.TB, p netParams) *topologies.Topology {
	t.Helper()
	if p.rate == 0 {
		p.rate = 100 * units.Gbps
	}
	if p.buffer == 0 {
		p.buffer = 4 * units.MiB
	}
	f, err := topologies.Generate(topologies.Params{
		Generate: "star", Name: "test", Hosts: p.hosts, Rate: p.rate,
		Delay: units.Duration(p.delay), Buffer: p.buffer, Aggregators: p.aggregators, Queues: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	top, err := f.Build("test")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range top.Links {
		l.Loss, l.Duplicate, l.Reorder = p.loss, p.dup, p.reorder
	}
	return top
}

func newNet(t testing.TB, top *topologies.Topology, k int, seed uint64) (*sim.Sim, *sim.Network) {
	t.Helper()
	s := sim.New()
	n, err := sim.NewNetwork(s, top, sim.Options{Seed: seed, Pipeline: ina.SimPipeline(k)})
	if err != nil {
		t.Fatal(err)
	}
	return s, n
}

// gradients makes deterministic random tensors: grads[it][w].
type gradients struct {
	seed  uint64
	limit int32
}

func (g gradients) fill(job uint16) func(w, it int, t []int32) {
	return func(w, it int, t []int32) {
		r := rand.New(rand.NewPCG(g.seed, uint64(job)<<32|uint64(w)<<16|uint64(it)))
		for i := range t {
			t[i] = r.Int32N(2*g.limit+1) - g.limit
		}
	}
}

// check verifies that t is the exact sum of every worker's tensor.
func (g gradients) check(job uint16, n, size int) func(w, it int, t []int32) error {
	want := map[int][]int32{}
	return func(w, it int, t []int32) error {
		sum, ok := want[it]
		if !ok {
			sum = make([]int32, size)
			buf := make([]int32, size)
			for i := range n {
				g.fill(job)(i, it, buf)
				for j := range sum {
					sum[j] += buf[j]
				}
			}
			want[it] = sum
		}
		if !slices.Equal(t, sum) {
			for j := range t {
				if t[j] != sum[j] {
					return fmt.Errorf("value %d is %d, want %d", j, t[j], sum[j])
				}
			}
		}
		return nil
	}
}

func hostNames(from, n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("h%d", from+i))
	}
	return out
}

func runJobs(t testing.TB, s *sim.Sim, jobs []*Job, limit sim.Time) {
	t.Helper()
	s.RunUntil(limit)
	for _, j := range jobs {
		if j.Err != nil {
			t.Fatalf("job %d: %v", j.Spec.ID, j.Err)
		}
		if !j.Done() {
			t.Fatalf("job %d: %d of %d workers finished by %v", j.Spec.ID, j.finished, len(j.Workers), limit)
		}
	}
}

// setupJobs adapts each spec with set, gives it g's tensors and exactness
// check, and sets it up on n.
func setupJobs(t testing.TB, n *sim.Network, g gradients, specs []JobSpec, set func(*JobSpec)) []*Job {
	t.Helper()
	var jobs []*Job
	for _, spec := range specs {
		set(&spec)
		spec.Fill, spec.Check = g.fill(spec.ID), g.check(spec.ID, len(spec.Hosts), spec.Elements)
		j, err := Setup(n, spec)
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j)
	}
	return jobs
}
