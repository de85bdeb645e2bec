package flow

import (
	"context"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/systems/dynaina"
	"github.com/tracebed/tracebed/traces/jobs"
	"github.com/tracebed/tracebed/traces/models"
	"github.com/tracebed/tracebed/workloads/training/fabric"
)

// longTrace is a trace whose length grows with its factor alone: the same
// 12 jobs of 4 workers (on 32 hosts: 8 run at once, 4 queue), each with
// 60,000 × factor iterations of a small model, so that a run records
// about 1.4 million changes of the memory in use per unit of factor,
// beyond the series' budget at factor 1 already.
func longTrace(factor int) ([]jobtrace.Job, func(string) (models.Profile, bool)) {
	prof := models.Profile{Name: "small", GradientBytes: 4 << 20, Compute: 2 * time.Millisecond}
	var js []jobtrace.Job
	for i := range 12 {
		js = append(js, jobtrace.Job{ID: i, Arrival: time.Duration(i) * 10 * time.Millisecond, Model: prof.Name, Workers: 4, Iterations: 60000 * factor})
	}
	return js, custom(prof)
}

// peakHeap runs f while sampling the heap's objects, live and not yet
// swept, every millisecond, and returns the largest sample in bytes: what
// the process holds, garbage included, as its resident size would show.
func peakHeap(f func()) uint64 {
	runtime.GC()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	var peak uint64
	read := func() {
		metrics.Read(sample)
		peak = max(peak, sample[0].Value.Uint64())
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				read()
			}
		}
	}()
	f()
	close(stop)
	wg.Wait()
	read()
	return peak
}

// BenchmarkLongRunHeap runs the same jobs for 1× and 10× their iterations
// under DynaINA and reports the peak heap of each (MB), their ratio, and
// the memory the run's changes of the memory in use would take kept whole
// (the flow model before its series was bounded): a 10× longer run must
// not take more memory.
func BenchmarkLongRunHeap(b *testing.B) {
	top := star(b, 32, 2048, 100*units.Gbps)
	var peak [2]float64
	var changes [2]uint64
	for range b.N {
		for i, factor := range []int{1, 10} {
			js, lookup := longTrace(factor)
			var o *Outcome
			p := peakHeap(func() {
				var err error
				o, err = Simulate(context.Background(), Setup{Top: top, Net: fabric.DefaultNet, Jobs: js, Policy: dynaina.Factory(dynaina.DefaultParams), Seed: 1, Lookup: lookup})
				if err != nil {
					b.Fatal(err)
				}
			})
			peak[i] = max(peak[i], float64(p)/1e6)
			changes[i] = o.MemChanges
		}
	}
	b.ReportMetric(peak[0], "peak-heap-MB-1x")
	b.ReportMetric(peak[1], "peak-heap-MB-10x")
	b.ReportMetric(peak[1]/peak[0], "heap-10x/1x")
	b.ReportMetric(float64(changes[0])*16/1e6, "whole-series-MB-1x")
	b.ReportMetric(float64(changes[1])*16/1e6, "whole-series-MB-10x")
}
