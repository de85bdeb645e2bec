package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/tracebed/tracebed/experiments"
)

// BenchmarkShardBalance times every run of dynaina-100g one by one, then
// reports how evenly the cost-based plan splits that time over 3 and 7
// shards — the most loaded shard's time over the mean, 1 being perfect —
// next to splitting by count (runs dealt out in order), and how well the
// estimates follow the times (Pearson's r). docs/scale-out.md quotes it.
func BenchmarkShardBalance(b *testing.B) {
	a := newApp(io.Discard, io.Discard)
	s, err := experiments.Open("dynaina-100g", a.readEmbedded)
	if err != nil {
		b.Fatal(err)
	}
	exp, err := a.registry.Compile(s)
	if err != nil {
		b.Fatal(err)
	}
	runs := experiments.Runs(s)
	times := make([]float64, len(runs))
	for range b.N {
		for i, r := range runs {
			r.Progress, r.NewTestbed = func(float64) {}, experiments.SimTestbed
			start := time.Now()
			if _, err := exp.Run(context.Background(), r); err != nil {
				b.Fatal(err)
			}
			times[i] += time.Since(start).Seconds()
		}
	}
	for _, n := range []int{3, 7} {
		plan := experiments.NewPlan(s, exp, n)
		byCost, byCount := make([]float64, n), make([]float64, n)
		var total float64
		for i, t := range times {
			byCost[plan.Shard[i]] += t
			byCount[i%n] += t
			total += t
		}
		b.ReportMetric(slices.Max(byCost)/(total/float64(n)), fmt.Sprintf("imbalance-%d-by-cost", n))
		b.ReportMetric(slices.Max(byCount)/(total/float64(n)), fmt.Sprintf("imbalance-%d-by-count", n))
	}
	b.ReportMetric(pearson(experiments.NewPlan(s, exp, 1).Cost, times), "cost-time-r")
}

func pearson(x, y []float64) float64 {
	n := float64(len(x))
	var mx, my float64
	for i := range x {
		mx += x[i] / n
		my += y[i] / n
	}
	var sxy, sxx, syy float64
	for i := range x {
		sxy += (x[i] - mx) * (y[i] - my)
		sxx += (x[i] - mx) * (x[i] - mx)
		syy += (y[i] - my) * (y[i] - my)
	}
	return sxy / math.Sqrt(sxx*syy)
}
