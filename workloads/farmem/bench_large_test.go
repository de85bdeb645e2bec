//go:build linux || darwin

package farmem

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tracebed/tracebed/experiments"
	"github.com/tracebed/tracebed/internal/testproc"
	memtrace "github.com/tracebed/tracebed/traces/mem"
)

// Environment of the child process of BenchmarkReplayLackey1GB.
const (
	replayChildEnv = "TRACEBED_REPLAY_CHILD_SPEC"
	// replayLackeySize is the recording's size (TRACEBED_REPLAY_BYTES
	// overrides it, for a quicker look).
	replayLackeySize = 1 << 30
)

// BenchmarkReplayLackey1GB replays a 1 GB valgrind lackey recording (a
// synthetic one, memtrace.SyntheticLackey, shaped like a real program's)
// on a paging host, as 'tracebed run' would: in a process of its own, once
// with an empty trace cache (the recording is converted, as a stream, to
// the binary form, then replayed) and once with the cache warm (replay
// only). It reports each process's peak resident memory, which must stay
// under 300 MB whatever the recording's length, the conversion rate
// (lackey data accesses per second) and the replay rate (page accesses
// per second of the run).
func BenchmarkReplayLackey1GB(b *testing.B) {
	if testing.Short() {
		b.Skip("writes and replays a 1 GB recording: minutes")
	}
	size := int64(replayLackeySize)
	if s, err := strconv.ParseInt(os.Getenv("TRACEBED_REPLAY_BYTES"), 10, 64); err == nil && s > 0 {
		size = s
	}
	dir := b.TempDir()
	trace := filepath.Join(dir, "big.lackey")
	f, err := os.Create(trace)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	if _, err := w.ReadFrom(&memtrace.SyntheticLackey{Size: size, Pages: 1 << 14, Seed: 1}); err != nil {
		b.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	f.Close()
	spec := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(spec, []byte(`kind: farmem
topology: {generate: star, hosts: 2, rate: 100Gbps, delay: 1us, buffer: 1MiB, queues: 8}
trace: big.lackey
workload: {roles: {hosts: [h1], servers: [h2]}, local_memory: 0.5}
policies: [glitter]
`), 0o644); err != nil {
		b.Fatal(err)
	}
	cache := filepath.Join(dir, "cache")
	b.ResetTimer()
	for range b.N {
		os.RemoveAll(cache)
		cold := replayChild(b, spec, cache)
		warm := replayChild(b, spec, cache)
		b.ReportMetric(float64(size)/1e9, "GB_recording")
		b.ReportMetric(cold.peakMB, "peak_MB_convert+replay")
		b.ReportMetric(warm.peakMB, "peak_MB_replay")
		b.ReportMetric(cold.dataAccesses/cold.prepare.Seconds()/1e6, "M_lackey_accesses/s")
		b.ReportMetric(warm.accesses/warm.run.Seconds()/1e6, "M_replayed_accesses/s")
		b.ReportMetric(warm.prepare.Seconds(), "s_prepare_warm")
	}
}

// childResult is what a replay child reported, and its peak memory.
type childResult struct {
	prepare, run           time.Duration
	accesses, dataAccesses float64
	peakMB                 float64
}

func replayChild(b *testing.B, spec, cache string) childResult {
	b.Helper()
	cmd := testproc.Command(b, os.Args[0], "-test.run=^TestReplayChild$", "-test.v")
	cmd.Env = append(os.Environ(), replayChildEnv+"="+spec, memtrace.CacheDirEnv+"="+cache)
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.Fatalf("replay child: %v\n%s", err, out)
	}
	var r childResult
	for _, line := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "replay:"); ok {
			var prep, run float64
			fmt.Sscanf(rest, " prepare %g run %g accesses %g data %g", &prep, &run, &r.accesses, &r.dataAccesses)
			r.prepare, r.run = time.Duration(prep*1e9), time.Duration(run*1e9)
		}
	}
	if r.accesses == 0 {
		b.Fatalf("replay child said nothing:\n%s", out)
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	r.peakMB = float64(ru.Maxrss) * 1024 / 1e6 // kilobytes on Linux
	if runtime.GOOS == "darwin" {
		r.peakMB = float64(ru.Maxrss) / 1e6 // bytes on macOS
	}
	return r
}

// TestReplayChild is the child process of BenchmarkReplayLackey1GB: it
// compiles and runs the spec it is given and prints how long each part
// took.
func TestReplayChild(t *testing.T) {
	path := os.Getenv(replayChildEnv)
	if path == "" {
		t.Skip("skipping: the child process of BenchmarkReplayLackey1GB, run only by it")
	}
	start := time.Now()
	spec, exp, err := compileFile(t, path)
	if err != nil {
		t.Fatal(err)
	}
	prepare := time.Since(start)
	start = time.Now()
	res, err := experiments.Execute(context.Background(), spec, exp, experiments.Options{Parallel: 1})
	if err != nil {
		t.Fatal(err)
	}
	run := time.Since(start)
	row := res.Runs[0].Table(TableHosts).Rows[0]
	if res.Runs[0].Metrics[MetricIntegrity] != 0 {
		t.Fatalf("%v integrity errors", res.Runs[0].Metrics[MetricIntegrity])
	}
	var data float64
	for _, sc := range exp.(*experiment).scenarios {
		data = float64(sc.traces[0].Stats.Accesses)
	}
	// The lackey data accesses behind the page accesses, from the cache's
	// record of the conversion.
	if entries, _ := filepath.Glob(filepath.Join(os.Getenv(memtrace.CacheDirEnv), "*.json")); len(entries) == 1 {
		if b, err := os.ReadFile(entries[0]); err == nil {
			if i := strings.Index(string(b), `"data_accesses": `); i >= 0 {
				fmt.Sscanf(string(b[i+len(`"data_accesses": `):]), "%g", &data)
			}
		}
	}
	fmt.Printf("replay: prepare %g run %g accesses %g data %g\n", prepare.Seconds(), run.Seconds(), row.Values["accesses"], data)
}
