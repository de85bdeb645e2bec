package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/tracebed/tracebed/experiments"
)

var (
	soak       = flag.Bool("soak", false, "run TestSoak: each kind at -soak.factor times its default size under a memory limit (minutes)")
	soakFactor = flag.Float64("soak.factor", 100, "TestSoak: how many times each kind's default size to run")
)

// soakSpecs are one run of each kind at factor times its default size
// (the kinds' DefaultParams): incast's packets per sender, the far-memory
// applications' passes over their working sets (STREAM's, 2 by default),
// the INA jobs. The sizes are of the work, whose records must not grow
// memory; a working set factor times larger needs factor times the memory
// for its pages, which the estimate says and --max-memory bounds.
func soakSpecs(factor float64) map[string]string {
	return map[string]string{
		"incast": fmt.Sprintf(`kind: incast
workload: {packets: %d, size: 1500B, rate: 10Gbps, delay: 1us}
policies: [{name: deep, buffer: 4MiB}]
`, int(1000*factor)),
		"farmem": fmt.Sprintf(`kind: farmem
workload: {app: stream, iterations: %d, background: {senders: 4, load: 0.5, frame: 9000B}}
policies: [glitter]
`, int(2*factor)),
		"ina": fmt.Sprintf(`kind: ina
topology: {generate: star, hosts: 32, rate: 100Gbps, aggregators: 2048}
workload: {jobs: %d}
policies: [dynaina]
`, int(24*factor)),
	}
}

// TestSoak runs one run of each kind at 100 times its default size (the
// -soak.factor flag) with the Go runtime's memory limit set to the run's
// estimate (experiments.Need) above what the process held before, samples
// the heap while it runs, and checks the peak against the estimate: memory
// is bounded, and the estimate that validate and run check against
// --max-memory is an upper bound. It takes minutes, so it runs only with
// -soak:
//
//	go test ./cmd/tracebed -run TestSoak -soak -timeout 60m -v
func TestSoak(t *testing.T) {
	if !*soak {
		t.Skip("skipping: the soak test takes minutes; run it with go test ./cmd/tracebed -run TestSoak -soak -timeout 60m -v")
	}
	specs := soakSpecs(*soakFactor)
	for _, kind := range []string{"incast", "farmem", "ina"} {
		t.Run(kind, func(t *testing.T) {
			a := newApp(io.Discard, io.Discard)
			s, err := experiments.ParseSpec(kind+"-soak.yaml", []byte(specs[kind]), a.readEmbedded)
			if err != nil {
				t.Fatal(err)
			}
			exp, err := a.registry.Compile(s)
			if err != nil {
				t.Fatal(err)
			}
			need := experiments.Needs(s, exp)[0]
			debug.FreeOSMemory()
			base := heapTotal()
			defer debug.SetMemoryLimit(debug.SetMemoryLimit(int64(base) + need.Memory))
			start := time.Now()
			var res error
			live, peak := peakDuring(func() {
				_, res = experiments.Execute(context.Background(), s, exp, experiments.Options{Parallel: 1})
			})
			if res != nil {
				t.Fatal(res)
			}
			total := int64(peak) - int64(base)
			t.Logf("%s ×%g: %v; peak live heap %s, peak held %s above %s; estimate %s (%.0f%% used), %.3g events estimated",
				kind, *soakFactor, time.Since(start).Round(time.Millisecond), experiments.ReadableBytes(int64(live)), experiments.ReadableBytes(total),
				experiments.ReadableBytes(int64(base)), experiments.ReadableBytes(need.Memory), 100*float64(live)/float64(need.Memory), need.Events)
			if int64(live) > need.Memory {
				t.Errorf("peak live heap %d bytes above the estimate of %d", live, need.Memory)
			}
			// With the memory limit at the estimate, the memory held stays
			// near it unless the live heap outgrows it (the limit is
			// soft: fragmentation and the collector's pace add some).
			if float64(total) > 1.25*float64(need.Memory)+(32<<20) {
				t.Errorf("peak memory held %d bytes, above the limit of %d", total, need.Memory)
			}
		})
	}
}

// heapTotal is the memory the Go runtime holds (what its memory limit
// bounds): everything mapped minus what it returned to the system.
func heapTotal() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64() - s[1].Value.Uint64()
}

// peakDuring runs f and returns the peak live heap (as of each garbage
// collection) and the peak memory held, sampled every millisecond.
func peakDuring(f func()) (live, total uint64) {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	var mu sync.Mutex
	sample := func() {
		metrics.Read(s)
		mu.Lock()
		live = max(live, s[0].Value.Uint64())
		total = max(total, heapTotal())
		mu.Unlock()
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				sample()
			}
		}
	}()
	f()
	close(done)
	wg.Wait()
	runtime.GC()
	sample()
	return live, total
}
