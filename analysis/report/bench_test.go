package report

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tracebed/tracebed/analysis"
)

// goTestOutput is what go test -bench prints for three packages: one with
// results (run twice), one whose benchmark skips, one that does not build.
const goTestOutput = `goos: linux
goarch: amd64
pkg: github.com/tracebed/tracebed/emulator/sim
cpu: Intel(R) Xeon(R) CPU @ 2.20GHz
BenchmarkEventCore-2   	 5000000	       200.0 ns/op	   5000000 events/s	       0 B/op	       0 allocs/op
BenchmarkEventCore-2   	 5000000	       300.0 ns/op	   3000000 events/s	       0 B/op	       0 allocs/op
BenchmarkLinkHop/hops=8-2         	  100000	      1000 ns/op	   1000000 events/s
PASS
ok  	github.com/tracebed/tracebed/emulator/sim	3.210s
goos: linux
goarch: amd64
pkg: github.com/tracebed/tracebed/emulator/switch
--- SKIP: BenchmarkSwitchPackets
    switch_test.go:42: needs root (creates network namespaces)
PASS
ok  	github.com/tracebed/tracebed/emulator/switch	0.010s
# github.com/tracebed/tracebed/p4/ina [github.com/tracebed/tracebed/p4/ina.test]
p4/ina/pipeline_test.go:12:2: undefined: Aggregate
FAIL	github.com/tracebed/tracebed/p4/ina [build failed]
goos: linux
goarch: amd64
pkg: github.com/tracebed/tracebed/p4/farmem
BenchmarkPipeline-2   	 1000	      1000 ns/op
--- FAIL: BenchmarkPipeline
    pipeline_test.go:80: dropped 3 packets
FAIL
FAIL	github.com/tracebed/tracebed/p4/farmem	0.5s
`

func TestParseGoBench(t *testing.T) {
	bms, notes, err := ParseGoBench(strings.NewReader(goTestOutput), "github.com/tracebed/tracebed")
	if err != nil {
		t.Fatal(err)
	}
	want := []Benchmark{
		{Package: "emulator/sim", Name: "BenchmarkEventCore", Procs: 2, Iterations: 5000000, Runs: 2,
			Metrics: map[string]float64{"ns/op": 250, "events/s": 4e6, "B/op": 0, "allocs/op": 0}},
		{Package: "emulator/sim", Name: "BenchmarkLinkHop/hops=8", Procs: 2, Iterations: 100000, Runs: 1,
			Metrics: map[string]float64{"ns/op": 1000, "events/s": 1e6}},
		{Package: "p4/farmem", Name: "BenchmarkPipeline", Procs: 2, Iterations: 1000, Runs: 1,
			Metrics: map[string]float64{"ns/op": 1000}},
	}
	if !reflect.DeepEqual(bms, want) {
		t.Errorf("benchmarks\n got %+v\nwant %+v", bms, want)
	}
	wantNotes := []BenchNote{
		{Package: "emulator/switch", Benchmark: "BenchmarkSwitchPackets", Status: StatusSkipped, Message: "needs root (creates network namespaces)"},
		{Package: "p4/ina", Status: StatusFailed, Message: "the package's tests do not build: p4/ina/pipeline_test.go:12:2: undefined: Aggregate"},
		{Package: "p4/farmem", Benchmark: "BenchmarkPipeline", Status: StatusFailed, Message: "dropped 3 packets"},
	}
	if !reflect.DeepEqual(notes, wantNotes) {
		t.Errorf("notes\n got %+v\nwant %+v", notes, wantNotes)
	}
}

func TestBenchRoundTrip(t *testing.T) {
	b := &Bench{Version: "v", Date: "2026-01-01T00:00:00Z", Benchtime: "1s", Machine: analysis.CurrentMachine(),
		Benchmarks: []Benchmark{{Package: "emulator/sim", Name: "BenchmarkEventCore", Runs: 1, Metrics: map[string]float64{"events/s": 1e7}}},
		Headline:   []Headline{{What: "simulation event rate", Package: "emulator/sim", Status: StatusOK, Unit: "events/s", Value: 1e7}},
	}
	data, err := b.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseBench("bench.json", data)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, b) {
		t.Errorf("round trip\n got %+v\nwant %+v", got, b)
	}
	if len(got.Units) != 1 || got.Units[0].Better != analysis.Higher {
		t.Errorf("units %+v", got.Units)
	}
	if _, err := ParseBench("r.json", []byte(`{"schema":"tracebed.results/v1"}`)); err == nil || !strings.Contains(err.Error(), "this is a results file") {
		t.Errorf("results file read as bench: %v", err)
	}
	if _, err := ReadBench(filepath.Join(sharedData, "farmem.results.json")); err == nil {
		t.Error("ReadBench accepted a results file")
	}
}

func TestSplitProcs(t *testing.T) {
	for in, want := range map[string]string{"BenchmarkA-8": "BenchmarkA", "BenchmarkA": "BenchmarkA", "BenchmarkA/x-y-16": "BenchmarkA/x-y"} {
		if got, _ := splitProcs(in); got != want {
			t.Errorf("splitProcs(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzParseGoBench(f *testing.F) {
	f.Add([]byte(goTestOutput))
	f.Add([]byte("BenchmarkX-2 10 5 ns/op 3 x/s\n--- SKIP: BenchmarkY\n    y.go:1: why\nok  \tm/p\t1s\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		bms, _, err := ParseGoBench(strings.NewReader(string(data)), "m")
		if err != nil {
			return
		}
		for _, b := range bms {
			if b.Runs < 1 || b.Name == "" {
				t.Fatalf("benchmark %+v", b)
			}
		}
	})
}
