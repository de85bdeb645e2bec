package analysis

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestDurationsExactThenBounded: below the limit quantiles are the exact
// nearest-rank ones; past it they stay within 0.1% while the values are no
// longer kept, and Count, Sum and Max stay exact.
func TestDurationsExactThenBounded(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var all []time.Duration
	d := Durations{Limit: 1000}
	var sum time.Duration
	for i := range 100000 {
		v := time.Duration(r.ExpFloat64() * float64(50*time.Microsecond))
		all = append(all, v)
		sum += v
		d.Add(v)
		if i == 999 {
			if !d.Exact() {
				t.Fatal("not exact at the limit")
			}
			s := slices.Sorted(slices.Values(all))
			for _, q := range []float64{0.01, 0.5, 0.99, 1} {
				if got, want := d.Quantile(q), s[int(math.Ceil(q*float64(len(s))))-1]; got != want {
					t.Errorf("exact q%g = %v, want %v", q, got, want)
				}
			}
		}
	}
	if d.Exact() || d.exact != nil {
		t.Fatal("still keeps every value past the limit")
	}
	slices.Sort(all)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		want := all[int(math.Ceil(q*float64(len(all))))-1]
		if got := d.Quantile(q); math.Abs(float64(got-want)) > 0.001*float64(want)+1 {
			t.Errorf("q%g = %v, want %v within 0.1%%", q, got, want)
		}
	}
	if d.Len() != len(all) || d.Sum() != sum || d.Max() != all[len(all)-1] {
		t.Errorf("len %d sum %v max %v; want %d %v %v", d.Len(), d.Sum(), d.Max(), len(all), sum, all[len(all)-1])
	}
	if pts := d.CDF(200); len(pts) != 200 || pts[199].Y != 1 || pts[199].X != float64(d.Quantile(1))/1e3 {
		t.Errorf("CDF: %d points, last %v", len(pts), pts[len(pts)-1])
	}
	var e, m Durations
	e.Add(time.Second)
	m.Merge(&e)
	m.Merge(&d)
	if m.Len() != d.Len()+1 || m.Exact() || m.Max() != time.Second {
		t.Errorf("merge: %d values, exact %v, max %v", m.Len(), m.Exact(), m.Max())
	}
}
