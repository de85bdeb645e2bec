package allreduce

import (
	"runtime"
	"testing"
	"time"

	"github.com/tracebed/tracebed/internal/cputime"
	"github.com/tracebed/tracebed/internal/units"
)

// BenchmarkAllReduce100MB runs one packet-level all-reduce of a 100 MB
// gradient (25M int32) among 8 workers through one switch at 100 Gbps:
// 390,625 chunks of 64 values per worker, every packet through the INA
// pipeline. The target is under 10 s of wall-clock time per op.
func BenchmarkAllReduce100MB(b *testing.B) {
	const elements = 25_000_000
	for b.Loop() {
		b.StopTimer()
		top := starTopo(b, netParams{hosts: 8, rate: 100 * units.Gbps, delay: time.Microsecond, aggregators: 8192})
		s, n := newNet(b, top, 64, 1)
		j, err := Setup(n, JobSpec{ID: 1, Mode: ModeINA, Hosts: hostNames(1, 8), Switch: "tor",
			Base: 0, Size: 512, Elements: elements, Iterations: 1})
		if err != nil {
			b.Fatal(err)
		}
		for w, wk := range j.Workers {
			for i := range wk.Tensor {
				wk.Tensor[i] = int32(i&1023 + w)
			}
		}
		s.RunUntil(0)
		var mem runtime.MemStats
		runtime.ReadMemStats(&mem)
		mallocs := mem.Mallocs
		cpu := cputime.Process()
		b.StartTimer()
		s.Run()
		b.StopTimer()
		c := cputime.Since(cpu).Seconds()
		runtime.ReadMemStats(&mem)
		pkts := float64(j.Workers[0].Reducer.(*Stream).Stats.Sent) * 8
		if !j.Done() || j.Err != nil {
			b.Fatalf("not done: %v", j.Err)
		}
		for i := 0; i < elements; i += 9973 {
			if want := int32(8*(i&1023) + 28); j.Workers[3].Tensor[i] != want {
				b.Fatalf("value %d = %d, want %d", i, j.Workers[3].Tensor[i], want)
			}
		}
		b.ReportMetric(float64(s.Fired()), "events/op")
		b.ReportMetric(j.Finish.Seconds()*1e3, "sim-ms/op")
		b.ReportMetric(float64(s.Fired())/b.Elapsed().Seconds(), "events/s")
		b.ReportMetric(c, "cpu-s/op")
		b.ReportMetric(float64(s.Fired())/c, "events/cpu-s")
		b.ReportMetric(float64(mem.Mallocs-mallocs)/pkts, "allocs/pkt")
		b.StartTimer()
	}
}
