package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/tracebed/tracebed/analysis"
	"github.com/tracebed/tracebed/internal/testproc"
	jobtrace "github.com/tracebed/tracebed/traces/jobs"
	memtrace "github.com/tracebed/tracebed/traces/mem"
)

func writeFile(t *testing.T, path string, r io.Reader) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, r); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestTraceConvertAndInfo(t *testing.T) {
	dir := t.TempDir()
	lackey := filepath.Join(dir, "p.lackey")
	writeFile(t, lackey, &memtrace.SyntheticLackey{Size: 2 << 20, Pages: 100, Seed: 1})
	bin, text, back := filepath.Join(dir, "p.memtrace"), filepath.Join(dir, "p.memtxt"), filepath.Join(dir, "q.memtrace")
	for _, args := range [][]string{{lackey, bin}, {bin, text}, {text, back}} {
		if code, stdout, stderr := run(t, append([]string{"trace", "convert"}, args...)...); code != 0 || !strings.Contains(stdout, "→ "+args[1]) {
			t.Fatalf("convert %v: exit %d\n%s%s", args, code, stdout, stderr)
		}
	}
	a, _ := os.ReadFile(bin)
	b, _ := os.ReadFile(back)
	if string(a) != string(b) {
		t.Error("binary → text → binary changed the trace")
	}
	code, stdout, _ := run(t, "trace", "info", bin)
	for _, want := range []string{"binary, version 2", "4KiB", "reads / writes", "Reuse distance", "First touches"} {
		if code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("info: exit %d, no %q in\n%s", code, want, stdout)
		}
	}
	code, stdout, _ = run(t, "trace", "info", "--format", "json", lackey)
	if code != 0 || !strings.Contains(stdout, `"format": "lackey"`) || !strings.Contains(stdout, `"reuse"`) {
		t.Errorf("info json: exit %d\n%s", code, stdout)
	}
	// Job traces: Gavel's, compressed, into CSV.
	csv := filepath.Join(dir, "philly.csv")
	code, stdout, stderr := run(t, "trace", "convert", "--time-compression", "1000", "../../traces/jobs/philly-e13805.trace", csv)
	if code != 0 || !strings.Contains(stdout, "607 jobs") {
		t.Fatalf("convert philly: exit %d\n%s%s", code, stdout, stderr)
	}
	got, _ := os.ReadFile(csv)
	orig, _ := os.ReadFile("../../traces/jobs/philly-e13805.trace")
	jobs, _, err := jobtrace.ParseCompressed("philly-e13805.trace", orig, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	if err := jobtrace.WriteCSV(&want, jobs, jobtrace.ConvertComment("philly-e13805.trace", jobtrace.Gavel, 1000)); err != nil {
		t.Fatal(err)
	}
	if string(got) != want.String() {
		t.Error("trace convert --time-compression 1000 does not write the jobs an INA spec replays with time_compression: 1000")
	}
	if code, stdout, _ = run(t, "trace", "info", csv); code != 0 || !strings.Contains(stdout, "607") || !strings.Contains(stdout, "inception3") {
		t.Errorf("job info: exit %d\n%s", code, stdout)
	}
	// The shipped trace itself, summarised and validated as the spec
	// replays it.
	gavel := "../../traces/jobs/philly-e13805.trace"
	if code, stdout, stderr = run(t, "trace", "info", "--time-compression", "1000", gavel); code != 0 || !strings.Contains(stdout, "gavel") || !strings.Contains(stdout, "607") {
		t.Errorf("trace info --time-compression 1000 %s: exit %d\n%s%s", gavel, code, stdout, stderr)
	}
	if code, stdout, stderr = run(t, "validate", "--time-compression", "1000", gavel); code != 0 || !strings.Contains(stdout, "ok (job trace (gavel): 607 jobs, compressed 1000× in time)") {
		t.Errorf("validate --time-compression 1000 %s: exit %d\n%s%s", gavel, code, stdout, stderr)
	}
}

func TestTraceErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.memtxt")
	if err := os.WriteFile(bad, []byte("W 1\nW 0b101\nX 2\nR 3 soon\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.memtxt")
	if err := os.WriteFile(empty, []byte("# nothing\npages 4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var header bytes.Buffer
	if err := memtrace.WriteBinary(&header, memtrace.Header{PageSize: 4096}, nil); err != nil {
		t.Fatal(err)
	}
	emptyBinary, headerSize := filepath.Join(dir, "empty.memtrace"), header.Len()
	writeFile(t, emptyBinary, &header)
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"trace", "convert", bad, filepath.Join(dir, "o.memtrace")}, []string{"bad.memtxt:2: page \"0b101\""}},
		{[]string{"validate", bad}, []string{"bad.memtxt:2: page \"0b101\"", "bad.memtxt:3: \"X\"", "bad.memtxt:4: gap \"soon\""}},
		{[]string{"trace", "info", bad}, []string{"bad.memtxt:2:", "bad.memtxt:4:"}},
		{[]string{"validate", empty}, []string{"empty.memtxt:1: no accesses"}},
		{[]string{"validate", emptyBinary}, []string{fmt.Sprintf("empty.memtrace: end at byte %d: no accesses", headerSize)}},
		{[]string{"trace", "convert", bad, filepath.Join(dir, "o.csv")}, []string{"want a memory trace"}},
		{[]string{"trace", "convert", "--time-compression", "0.5", "../../traces/jobs/sample.csv", filepath.Join(dir, "o.csv")}, []string{"--time-compression 0.5"}},
		{[]string{"validate", "../../traces/jobs/philly-e13805.trace"}, []string{"philly-e13805.trace:214: total_steps:", "compress the trace in time by 2 or more", "--time-compression of tracebed trace convert, trace info and validate"}},
		{[]string{"trace", "info", "../../traces/jobs/philly-e13805.trace"}, []string{"compress the trace in time by 2 or more"}},
		{[]string{"trace", "info", "--time-compression", "2", bad}, []string{"--time-compression applies to job traces"}},
		{[]string{"validate", "--time-compression", "0", "../../traces/jobs/sample.csv"}, []string{"time compression 0: want a factor of 1 or more"}},
	} {
		code, _, stderr := run(t, tc.args...)
		for _, w := range tc.want {
			if code != 2 || !strings.Contains(stderr, w) {
				t.Errorf("%v: exit %d, want 2 and %q in\n%s", tc.args, code, w, stderr)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "o.memtrace")); err == nil {
		t.Error("a failed conversion left its output behind")
	}
}

// TestValidateStreams validates a lackey recording larger than the heap it
// may use: validate reads it as a stream.
func TestValidateStreams(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.lackey")
	const size = 96 << 20
	writeFile(t, path, &memtrace.SyntheticLackey{Size: size, Pages: 1 << 12, Seed: 2})
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	code, stdout, stderr := run(t, "validate", path)
	runtime.ReadMemStats(&after)
	if code != 0 || !strings.Contains(stdout, "ok (memory trace, lackey format") {
		t.Fatalf("exit %d\n%s%s", code, stdout, stderr)
	}
	// HeapSys (heap obtained from the system) does not shrink within a
	// run: had the file been read whole, it would have grown by its size.
	if grew := int64(after.HeapSys) - int64(before.HeapSys); grew > size/4 {
		t.Errorf("validating a %d MiB trace grew the heap by %d MiB", size>>20, grew>>20)
	}
}

// TestRunWritesHostTable: a far-memory run writes its per-host table as
// hosts.csv, and its trace comes from next to the spec.
func TestRunWritesHostTable(t *testing.T) {
	t.Setenv(memtrace.CacheDirEnv, t.TempDir())
	dir, out := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "two.memtxt"), []byte("pages 4\nW 0 1us\nW 1 1us\nW 2 1us\nW 3 1us\nR 0 1us\nR 1 1us\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := filepath.Join(dir, "fm.yaml")
	if err := os.WriteFile(spec, []byte(`kind: farmem
topology: {generate: star, hosts: 3, rate: 100Gbps, delay: 1us, buffer: 256KiB, queues: 8}
trace: two.memtxt
workload: {roles: {hosts: [h1, h2], servers: [h3]}, local_memory: 0.5}
policies: [fastswap]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := run(t, "run", "--quiet", "--plots=false", "--out", out, spec); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	data, err := os.ReadFile(filepath.Join(out, "fm", "hosts.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(string(data)), "\n"); len(lines) != 3 || !strings.HasPrefix(lines[0], "experiment,scenario,policy,seed,host,app,trace,") ||
		!strings.HasPrefix(lines[1], "fm,default,fastswap,1,h1,trace,two.memtxt,") {
		t.Errorf("hosts.csv:\n%s", data)
	}
	res, err := analysis.Read(filepath.Join(out, "fm"))
	if err != nil || res.Runs[0].Table("hosts") == nil {
		t.Errorf("results.json has no host table: %v", err)
	}
}

// TestTraceRecord records a real program with valgrind and replays the
// recording's statistics; it needs valgrind and gcc.
func TestTraceRecord(t *testing.T) {
	if _, err := exec.LookPath("valgrind"); err != nil {
		t.Skip("valgrind is not installed: cannot record a program (apt-get install valgrind)")
	}
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc is not installed: cannot build the program to record")
	}
	dir := t.TempDir()
	prog := filepath.Join(dir, "stride")
	if out, err := testproc.Command(t, cc, "-O1", "-o", prog, "../../traces/mem/testdata/stride.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	out := filepath.Join(dir, "stride.memtrace")
	code, stdout, stderr := run(t, "trace", "record", "--out", out, "--", prog)
	if code != 0 || !strings.Contains(stdout, out+": ") {
		t.Fatalf("exit %d\n%s%s", code, stdout, stderr)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	info, err := memtrace.Inspect(out, f, memtrace.InspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The program writes, then reads, 64 pages of its own: at least those
	// are in the recording, besides the loader's and libc's.
	if info.Format != memtrace.Binary || info.Stats.Pages < 64 || info.Stats.Writes < 64 {
		t.Errorf("recorded %v", info.Stats)
	}
	if code, _, stderr := run(t, "trace", "record", "--out", filepath.Join(dir, "x.memtrace"), "--", filepath.Join(dir, "nosuch")); code != 2 || !strings.Contains(stderr, "nothing was recorded") {
		t.Errorf("recording a missing program: exit %d\n%s", code, stderr)
	}
	fmt.Fprint(io.Discard, stderr)
}

// TestPhillySpecValidates: the ready spec replaying Philly's jobs compiles,
// on disk and built in.
func TestPhillySpecValidates(t *testing.T) {
	code, stdout, stderr := run(t, "validate", "../../experiments/dynaina-philly.yaml")
	if code != 0 || !strings.Contains(stdout, "experiment dynaina-philly of kind ina: 4 policies × 4 scenarios × 1 seeds = 16 runs") {
		t.Errorf("exit %d\n%s%s", code, stdout, stderr)
	}
}
