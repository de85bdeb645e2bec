package flow

import (
	"math"
	"math/bits"
	"slices"

	"github.com/tracebed/tracebed/analysis"
)

// DefaultSeriesBudget is how many changes of the memory in use a run keeps
// exactly: 16 MiB of steps, more than any ready spec's run makes (the
// longest, dynaina-philly's, makes about 0.3 M).
const DefaultSeriesBudget = 1 << 20

// stepSeries records a step function of time — a value that holds from
// each change until the next — and averages it over equal bins of a span
// known only at the end (the makespan, for the memory-utilisation series).
//
// It keeps every change while they number at most its budget, and then
// bins them exactly as binSteps does: the same float operations in the
// same order, so a run's series does not depend on the budget as long as
// the run stays within it. Beyond the budget it switches, once, to fine
// time-weighted bins: K bins of equal width from the origin, each holding
// the exact area (value × time) of the function over it; when the function
// runs past the last bin, the width doubles and pairs of bins merge, so
// the memory stays K floats whatever the run's length. The final bins are
// then sums of fine bins, the two fine bins a final bin's edges cut being
// split in proportion to the time on each side. That split is the only
// approximation: with the fine width at most twice the span over K, each
// final bin's average is within 4·n/K × (the function's range) of binSteps'
// (n final bins; K ≥ 4096·n up to 2²², so within 0.1% of the range for
// 200 bins).
type stepSeries struct {
	origin  float64
	budget  int
	changes uint64           // at distinct times, so far
	steps   []analysis.Point // while exact; nil once binned

	// Binned: fine[i] is the area over [origin + i·width, origin + (i+1)·width);
	// the function holds cur since t.
	binned bool
	fine   []float64
	k      int
	width  float64
	t, cur float64
}

// newStepSeries returns a series whose function is 0 from origin until its
// first change, keeping at most budget changes exactly (0:
// DefaultSeriesBudget) and, beyond, fine bins enough for n final bins.
func newStepSeries(origin float64, budget, n int) *stepSeries {
	if budget <= 0 {
		budget = DefaultSeriesBudget
	}
	k := 1 << 16
	if n > 0 {
		k = 1 << min(22, max(16, bits.Len(uint(4096*n-1))))
	}
	return &stepSeries{origin: origin, budget: budget, k: k}
}

// set records that the function takes value y from time x on; x never
// decreases. A second change at the same time replaces the first.
func (s *stepSeries) set(x, y float64) {
	if s.binned {
		if x != s.t {
			s.changes++
		}
		s.add(s.t, x, s.cur)
		s.t, s.cur = max(s.t, x), y
		return
	}
	if n := len(s.steps); n > 0 && s.steps[n-1].X == x {
		s.steps[n-1].Y = y
		return
	}
	s.changes++
	if len(s.steps) == s.budget {
		s.changes--
		s.bin()
		s.set(x, y)
		return
	}
	if len(s.steps) == cap(s.steps) {
		// Grow as append would, but never past the budget.
		s.steps = slices.Grow(s.steps, min(max(2*cap(s.steps), 1024), s.budget)-len(s.steps))
	}
	s.steps = append(s.steps, analysis.Point{X: x, Y: y})
}

// bin switches to fine bins: the steps kept so far fill the first half of
// them.
func (s *stepSeries) bin() {
	last := s.steps[len(s.steps)-1].X
	s.width = (last - s.origin) / float64(s.k/2)
	if !(s.width > 0) {
		s.width = math.SmallestNonzeroFloat64
	}
	s.fine = make([]float64, s.k)
	s.binned = true
	s.t, s.cur = s.origin, 0
	for _, p := range s.steps {
		s.add(s.t, p.X, s.cur)
		s.t, s.cur = max(s.t, p.X), p.Y
	}
	s.steps = nil
}

// add adds the area of value v over [a, b) to the fine bins, growing them
// to cover b.
func (s *stepSeries) add(a, b, v float64) {
	if !(b > a) {
		return
	}
	for s.origin+float64(s.k)*s.width < b {
		s.grow()
	}
	if v == 0 {
		return
	}
	i := s.index(a)
	for ; i < s.k; i++ {
		lo := s.origin + float64(i)*s.width
		hi := lo + s.width
		if i == s.k-1 {
			hi = math.Inf(1)
		}
		from, to := max(a, lo), min(b, hi)
		if to > from {
			s.fine[i] += v * (to - from)
		}
		if b <= hi {
			break
		}
	}
}

// index is the fine bin holding time x.
func (s *stepSeries) index(x float64) int {
	i := int((x - s.origin) / s.width)
	return max(0, min(s.k-1, i))
}

// grow doubles the fine bins' width, merging pairs.
func (s *stepSeries) grow() {
	for i := range s.k / 2 {
		s.fine[i] = s.fine[2*i] + s.fine[2*i+1]
	}
	clear(s.fine[s.k/2:])
	s.width *= 2
}

// bins averages the function over n equal bins of [from, to] (from at or
// after the origin, to at or after the last change); X of each point is
// the bin's middle. It ends the series.
func (s *stepSeries) bins(from, to float64, n int) []analysis.Point {
	if !s.binned {
		return binSteps(s.steps, from, to, n)
	}
	if to <= from || n <= 0 {
		return nil
	}
	s.add(s.t, to, s.cur)
	s.t = max(s.t, to)
	w := (to - from) / float64(n)
	out := make([]analysis.Point, n)
	for i := range out {
		lo, hi := from+float64(i)*w, from+float64(i+1)*w
		out[i] = analysis.Point{X: (lo + hi) / 2, Y: s.area(lo, hi) / w}
	}
	return out
}

// area is the area over [lo, hi) of the fine bins, a fine bin cut by an
// edge counted in proportion to its time inside (the last one holding
// area only up to the series' end).
func (s *stepSeries) area(lo, hi float64) float64 {
	var a float64
	for i := s.index(lo); i < s.k; i++ {
		blo := s.origin + float64(i)*s.width
		bhi := min(blo+s.width, s.t)
		if blo >= hi || bhi <= blo {
			break
		}
		if in := min(hi, bhi) - max(lo, blo); in > 0 {
			a += s.fine[i] * in / (bhi - blo)
		}
	}
	return a
}

// binSteps averages a step function (value Y from X until the next point)
// over n equal bins of [from, to]; X of each output point is the bin's
// middle.
func binSteps(steps []analysis.Point, from, to float64, n int) []analysis.Point {
	if to <= from || n <= 0 {
		return nil
	}
	w := (to - from) / float64(n)
	out := make([]analysis.Point, n)
	k := 0
	cur := 0.0
	for i := range out {
		lo, hi := from+float64(i)*w, from+float64(i+1)*w
		var area float64
		t := lo
		for k < len(steps) && steps[k].X <= t {
			cur = steps[k].Y
			k++
		}
		for k < len(steps) && steps[k].X < hi {
			area += cur * (steps[k].X - t)
			t = steps[k].X
			cur = steps[k].Y
			k++
		}
		area += cur * (hi - t)
		out[i] = analysis.Point{X: (lo + hi) / 2, Y: area / w}
	}
	return out
}
