package analysis

import (
	"math"
	"slices"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// MaxExactDurations is how many values a Durations keeps one by one (8 MiB
// of them); beyond, it keeps a histogram instead.
const MaxExactDurations = 1 << 20

// Durations collects durations (latencies, say) and answers their
// quantiles and CDF in memory that does not grow with their number: it
// keeps every value, and its quantiles are exact (nearest rank), up to a
// bound of values; past the bound it moves them into a histogram of three
// significant digits (HdrHistogram: a fixed 350 KiB from 1 ns to 104 days),
// whose quantiles are within 0.1% of the exact ones. Count, Sum and Max
// stay exact. The zero value keeps up to MaxExactDurations values.
type Durations struct {
	// Limit is the bound of values kept one by one; 0 means
	// MaxExactDurations.
	Limit  int
	exact  []time.Duration
	sorted bool
	hist   *hdrhistogram.Histogram
	n      int64
	sum    time.Duration
	max    time.Duration
}

// histRange is the range of the histogram, in nanoseconds; values outside
// are counted at its ends.
const (
	histLowest  = 1
	histHighest = 1 << 53
	histDigits  = 3
)

// Add records one value.
func (d *Durations) Add(v time.Duration) {
	d.n++
	d.sum += v
	if d.n == 1 || v > d.max {
		d.max = v
	}
	if d.hist == nil {
		limit := d.Limit
		if limit <= 0 {
			limit = MaxExactDurations
		}
		if len(d.exact) < limit {
			d.exact = append(d.exact, v)
			d.sorted = false
			return
		}
		d.toHistogram()
	}
	d.record(v, 1)
}

// toHistogram moves the values kept one by one into the histogram.
func (d *Durations) toHistogram() {
	d.hist = hdrhistogram.New(histLowest, histHighest, histDigits)
	for _, v := range d.exact {
		d.record(v, 1)
	}
	d.exact, d.sorted = nil, false
}

func (d *Durations) record(v time.Duration, n int64) {
	d.hist.RecordValues(min(max(int64(v), histLowest), histHighest), n)
}

// Merge adds every value of o.
func (d *Durations) Merge(o *Durations) {
	if o == nil || o.n == 0 {
		return
	}
	if o.hist == nil {
		for _, v := range o.exact {
			d.Add(v)
		}
		return
	}
	if d.hist == nil {
		d.toHistogram()
	}
	d.hist.Merge(o.hist)
	if d.n == 0 || o.max > d.max {
		d.max = o.max
	}
	d.n += o.n
	d.sum += o.sum
}

// Len returns the number of values recorded.
func (d *Durations) Len() int { return int(d.n) }

// Sum returns the sum of the values.
func (d *Durations) Sum() time.Duration { return d.sum }

// Max returns the largest value (0 if there is none).
func (d *Durations) Max() time.Duration { return d.max }

// Exact reports whether quantiles are exact: every value is kept.
func (d *Durations) Exact() bool { return d.hist == nil }

// Quantile returns the q-quantile (0 < q ≤ 1) by nearest rank: the
// ⌈q·n⌉-th smallest value; 0 if there is none.
func (d *Durations) Quantile(q float64) time.Duration {
	if d.n == 0 {
		return 0
	}
	if d.hist != nil {
		return min(time.Duration(d.hist.ValueAtQuantile(100*q)), d.max)
	}
	d.sort()
	i := int(math.Ceil(q*float64(len(d.exact)))) - 1
	return d.exact[min(max(i, 0), len(d.exact)-1)]
}

func (d *Durations) sort() {
	if !d.sorted {
		slices.Sort(d.exact)
		d.sorted = true
	}
}

// Sorted returns the values in increasing order while they are all kept
// (Exact), and nil after. The slice is the Durations' own.
func (d *Durations) Sorted() []time.Duration {
	if d.hist != nil {
		return nil
	}
	d.sort()
	return d.exact
}

// CDF returns at most n points of the empirical CDF, X the value in
// microseconds, Y the fraction of values at most X: the quantiles i/k for
// k = min(n, count), i = 1…k.
func (d *Durations) CDF(n int) []Point {
	if d.n == 0 {
		return nil
	}
	var pts []Point
	k := min(n, d.Len())
	for i := 1; i <= k; i++ {
		if d.hist == nil {
			d.sort()
			idx := int(math.Ceil(float64(i)*float64(len(d.exact))/float64(k))) - 1
			pts = append(pts, Point{X: float64(d.exact[idx]) / 1e3, Y: float64(idx+1) / float64(len(d.exact))})
			continue
		}
		q := float64(i) / float64(k)
		pts = append(pts, Point{X: float64(d.Quantile(q)) / 1e3, Y: q})
	}
	return pts
}

// DurationsBytes estimates the memory a Durations of n values holds, with
// limit values kept one by one at most (0: MaxExactDurations).
func DurationsBytes(n, limit int) int64 {
	if limit <= 0 {
		limit = MaxExactDurations
	}
	if n <= limit {
		return int64(n) * 8 * 2 // the slice grows by doubling
	}
	return int64(limit)*8*2 + histBytes
}

// histBytes is the size of the histogram's counts.
const histBytes = 512 << 10
