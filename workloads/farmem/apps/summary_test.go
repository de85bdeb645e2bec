package apps

import (
	"errors"
	"math"
	"testing"
	"time"

	memtrace "github.com/tracebed/tracebed/traces/mem"
)

// TestSummarizeExtrapolates compares Summarize's extrapolation (budget 0
// forces it) with the stream read to the end, for every workload: equal
// for those whose iterations do the same work, within 5% for quicksort,
// whose pivots are random.
func TestSummarizeExtrapolates(t *testing.T) {
	for _, w := range Workloads {
		for _, iters := range []int{3, 7} {
			p := Params{Scale: 256, Seed: 1, Iterations: iters}
			got, err := Summarize(w.Name, p, 0, nil)
			if err != nil {
				t.Fatal(err)
			}
			g, err := New(w.Name, p)
			if err != nil {
				t.Fatal(err)
			}
			want, err := memtrace.Summarize(g)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Extrapolated {
				t.Errorf("%s ×%d: not extrapolated with budget 0", w.Name, iters)
			}
			tol := 0.0
			if w.Name == "quicksort" {
				tol = 0.05
			}
			if d := relDiff(got.Accesses, want.Accesses); d > tol {
				t.Errorf("%s ×%d: extrapolated %d accesses, counted %d (%.2f%% off, want ≤ %.0f%%)", w.Name, iters, got.Accesses, want.Accesses, 100*d, 100*tol)
			}
			if d := relDiff(uint64(got.Compute), uint64(want.Compute)); d > tol {
				t.Errorf("%s ×%d: extrapolated %v of compute, counted %v (%.2f%% off, want ≤ %.0f%%)", w.Name, iters, got.Compute, want.Compute, 100*d, 100*tol)
			}
		}
	}
}

// TestSummarizeExact: within the budget, and for the default length
// whatever the budget, the stream is counted to the end.
func TestSummarizeExact(t *testing.T) {
	for _, w := range Workloads {
		for _, p := range []Params{{Scale: 256, Seed: 3}, {Scale: 256, Seed: 3, Iterations: 2}, {Scale: 256, Seed: 3, Iterations: 5}} {
			budget := uint64(math.MaxUint64)
			if p.Iterations <= 2 {
				budget = 0 // ignored: the length is bounded by the scale
			}
			got, err := Summarize(w.Name, p, budget, nil)
			if err != nil {
				t.Fatal(err)
			}
			g, _ := New(w.Name, p)
			want, err := memtrace.Summarize(g)
			if err != nil {
				t.Fatal(err)
			}
			if got.Extrapolated || got.Accesses != want.Accesses || got.Compute != want.Compute {
				t.Errorf("%s %+v: %+v; want %d accesses, %v counted", w.Name, p, got, want.Accesses, want.Compute)
			}
		}
	}
}

// TestSummarizeLarge: the largest iteration count at full size is
// summarized from two iterations' streams (its own would take hours), and
// its figures are those iterations' extrapolated.
func TestSummarizeLarge(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short mode: counts two full-size iterations of memcached")
	}
	p := Params{Scale: 1, Seed: 1, Iterations: 1e6}
	got, err := Summarize("memcached", p, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	pages, _ := WorkingSet("memcached", 1)
	// The load phase writes every page, then 10^9 requests of two
	// accesses each.
	if want := uint64(pages) + 2e9; !got.Extrapolated || got.Accesses != want {
		t.Errorf("memcached ×10^6 at scale 1: %+v; want %d accesses, extrapolated", got, want)
	}
	if want := time.Duration(pages)*initGap + 1e9*mcRequestGap; got.Compute != want {
		t.Errorf("compute %v; want %v", got.Compute, want)
	}
}

// TestSummarizeStops: stop's error ends the summary.
func TestSummarizeStops(t *testing.T) {
	errStop := errors.New("stop")
	calls := 0
	stop := func() error {
		if calls++; calls > 3 {
			return errStop
		}
		return nil
	}
	if _, err := Summarize("pagerank", Params{Scale: 1, Seed: 1, Iterations: 1e6}, 1<<20, stop); !errors.Is(err, errStop) {
		t.Fatalf("Summarize with stop failing: %v; want %v", err, errStop)
	}
}

func TestAddMulSaturates(t *testing.T) {
	for _, c := range []struct{ a, b, n, want uint64 }{
		{1, 2, 3, 7},
		{5, 0, math.MaxUint64, 5},
		{1, 1 << 40, 1 << 30, math.MaxUint64},
		{math.MaxUint64 - 1, 1, 1, math.MaxUint64},
		{math.MaxUint64 - 1, 1, 2, math.MaxUint64},
	} {
		if got := addMul(c.a, c.b, c.n); got != c.want {
			t.Errorf("addMul(%d, %d, %d) = %d; want %d", c.a, c.b, c.n, got, c.want)
		}
	}
}

func relDiff(a, b uint64) float64 {
	if b == 0 {
		return math.Abs(float64(a))
	}
	return math.Abs(float64(a)-float64(b)) / float64(b)
}
