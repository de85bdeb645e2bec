package farmem

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/tracebed/tracebed/experiments"
	"github.com/tracebed/tracebed/internal/cputime"
)

// BenchmarkGlitterSuite runs the whole default Glitter experiment
// (experiments/glitter-100g.yaml: 21 scenarios × 4 policies) with two runs
// at a time, as `make run` does on two cores. The target is under 60 s of
// wall time on two otherwise idle cores; cpu-s/suite is the work, which
// does not depend on what else the machine runs.
func BenchmarkGlitterSuite(b *testing.B) {
	if testing.Short() {
		b.Skip("the whole suite takes tens of seconds")
	}
	spec, err := experiments.Open("glitter-100g", readEmbedded)
	if err != nil {
		b.Fatal(err)
	}
	exp, err := Kind{}.Compile(spec)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start, cpu0 := time.Now(), cputime.Process()
	runs := 0
	for range b.N {
		res, err := experiments.Execute(context.Background(), spec, exp, experiments.Options{Parallel: 2})
		if err != nil {
			b.Fatal(err)
		}
		runs += len(res.Runs)
	}
	wall, cpu := time.Since(start).Seconds(), (cputime.Process() - cpu0).Seconds()
	b.ReportMetric(wall/float64(b.N), "s/suite")
	b.ReportMetric(cpu/float64(b.N), "cpu-s/suite")
	b.ReportMetric(cpu/2/float64(b.N), "s/suite-on-2-idle-cores")
	b.ReportMetric(float64(runs)/float64(b.N), "runs/suite")
	b.ReportMetric(float64(runtime.GOMAXPROCS(0)), "procs")
}
