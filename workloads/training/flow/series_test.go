package flow

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tracebed/tracebed/analysis"
	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/workloads/training/fabric"
)

// recordAll is how the flow model recorded the memory in use before
// stepSeries: every change appended, a second change at the same time
// replacing the first. The tests hold stepSeries to binSteps of this.
func recordAll(steps []analysis.Point, x, y float64) []analysis.Point {
	if n := len(steps); n > 0 && steps[n-1].X == x {
		steps[n-1].Y = y
		return steps
	}
	return append(steps, analysis.Point{X: x, Y: y})
}

// randomSteps draws n changes of a fraction in [0, 1] from origin on:
// gaps of widely different lengths (long idle stretches, bursts), some
// changes at the same time, values often returning to 0.
func randomSteps(seed uint64, origin float64, n int) []analysis.Point {
	r := rand.New(rand.NewPCG(seed, 11))
	x := origin
	out := make([]analysis.Point, 0, n)
	for range n {
		switch r.IntN(6) {
		case 0: // same time
		case 1:
			x += r.ExpFloat64() * 100
		default:
			x += r.ExpFloat64() * 1e-3
		}
		y := 0.0
		if r.IntN(3) > 0 {
			y = r.Float64()
		}
		out = append(out, analysis.Point{X: x, Y: y})
	}
	return out
}

func sameBits(a, b []analysis.Point) error {
	if len(a) != len(b) {
		return fmt.Errorf("%d points, want %d", len(a), len(b))
	}
	for i := range a {
		if math.Float64bits(a[i].X) != math.Float64bits(b[i].X) || math.Float64bits(a[i].Y) != math.Float64bits(b[i].Y) {
			return fmt.Errorf("point %d: %v, want %v", i, a[i], b[i])
		}
	}
	return nil
}

// TestStepSeriesExact: within its budget the series bins exactly as the
// flow model did when it kept every change: the same bits.
func TestStepSeriesExact(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		origin := float64(seed) * 3.7
		changes := randomSteps(seed, origin, 5000)
		var all []analysis.Point
		s := newStepSeries(origin, len(changes), 200)
		for _, c := range changes {
			all = recordAll(all, c.X, c.Y)
			s.set(c.X, c.Y)
		}
		if s.binned {
			t.Fatalf("seed %d: binned within its budget", seed)
		}
		to := all[len(all)-1].X + float64(seed)
		if err := sameBits(s.bins(origin, to, 200), binSteps(all, origin, to, 200)); err != nil {
			t.Errorf("seed %d: %v", seed, err)
		}
	}
}

// TestStepSeriesBinned: past its budget the series keeps fine bins, and
// every final bin stays within the documented bound of binSteps over
// every change, 4·n/K of the function's range; the total area is kept.
// Budgets from tiny (binned after a few changes, the fine bins growing
// many times) to half the changes.
func TestStepSeriesBinned(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		for _, budget := range []int{1, 10, 1000, 20000} {
			for _, n := range []int{1, 50, 200} {
				origin := 10 * float64(seed)
				changes := randomSteps(seed, origin, 40000)
				var all []analysis.Point
				s := newStepSeries(origin, budget, n)
				for _, c := range changes {
					all = recordAll(all, c.X, c.Y)
					s.set(c.X, c.Y)
				}
				if !s.binned || s.steps != nil || len(s.fine) != s.k {
					t.Fatalf("seed %d, budget %d: %d changes kept, binned %v", seed, budget, len(s.steps), s.binned)
				}
				to := all[len(all)-1].X * (1 + 1e-3)
				want := binSteps(all, origin, to, n)
				got := s.bins(origin, to, n)
				bound := 4 * float64(n) / float64(s.k) // the function's range is at most 1
				var wantArea, gotArea float64
				for i := range want {
					if got[i].X != want[i].X {
						t.Fatalf("seed %d, budget %d, %d bins: bin %d at %v, want %v", seed, budget, n, i, got[i].X, want[i].X)
					}
					if d := math.Abs(got[i].Y - want[i].Y); d > bound {
						t.Errorf("seed %d, budget %d, %d bins: bin %d averages %.9f, binSteps %.9f: off by %.3g, bound %.3g", seed, budget, n, i, got[i].Y, want[i].Y, d, bound)
					}
					wantArea += want[i].Y
					gotArea += got[i].Y
				}
				if !near(gotArea, wantArea, 1e-9) {
					t.Errorf("seed %d, budget %d, %d bins: total %.12f, binSteps %.12f", seed, budget, n, gotArea, wantArea)
				}
			}
		}
	}
}

// TestSeriesBudgetRun: a flow-level run whose series outgrows its budget
// gives the same jobs and metrics as with the default budget, and a
// series within the bound of the exact one.
func TestSeriesBudgetRun(t *testing.T) {
	top := star(t, 12, 1024, 100*units.Gbps)
	trace := randomTrace(4, 14, 8)
	for _, pol := range policyNames {
		t.Run(pol, func(t *testing.T) {
			s := Setup{Top: top, Net: fabric.DefaultNet, Jobs: trace, Policy: policies()[pol], Seed: 4}
			exact := simulate(t, s)
			s.SeriesBudget = 16
			binned := simulate(t, s)
			if exact.AvgJCT() != binned.AvgJCT() || exact.MemUtil != binned.MemUtil || exact.Events != binned.Events {
				t.Errorf("budget 16: avg JCT %v, mem_util %v, %d events; default budget: %v, %v, %d", binned.AvgJCT(), binned.MemUtil, binned.Events, exact.AvgJCT(), exact.MemUtil, exact.Events)
			}
			k := newStepSeries(0, 1, 200).k
			for i := range exact.MemSeries {
				if d := math.Abs(exact.MemSeries[i].Y - binned.MemSeries[i].Y); d > 4*200/float64(k) {
					t.Errorf("bin %d: %.9f binned, %.9f exact", i, binned.MemSeries[i].Y, exact.MemSeries[i].Y)
				}
			}
		})
	}
}

// BenchmarkSeriesSet is the cost of recording one change once binned.
func BenchmarkSeriesSet(b *testing.B) {
	changes := randomSteps(1, 0, 1<<16)
	s := newStepSeries(0, 1, 200)
	b.ResetTimer()
	shift := 0.0
	for i := range b.N {
		c := changes[i%len(changes)]
		if i%len(changes) == 0 && i > 0 {
			shift += changes[len(changes)-1].X
		}
		s.set(c.X+shift, c.Y)
	}
}
