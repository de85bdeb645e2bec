package jobtrace

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tracebed/tracebed/traces/models"
)

// sharedPhilly finds ../shared/traces/philly above the working directory,
// where the development machine keeps the original files.
func sharedPhilly(t *testing.T) string {
	dir, _ := os.Getwd()
	for range 6 {
		p := filepath.Join(dir, "shared", "traces", "philly")
		if _, err := os.Stat(p); err == nil {
			return p
		}
		dir = filepath.Dir(dir)
	}
	t.Skip("skipping the comparison with the original files: no shared/traces/philly above the working directory (only on the development machine)")
	return ""
}

func TestPhilly(t *testing.T) {
	data, err := fs.ReadFile(Samples, PhillyTrace)
	if err != nil {
		t.Fatal(err)
	}
	// Uncompressed, the longest jobs need too many iterations.
	if _, _, err := Parse(PhillyTrace, data); err == nil || !strings.Contains(err.Error(), "philly-e13805.trace:214: total_steps:") ||
		!strings.Contains(err.Error(), "compress the trace in time by 2 or more") {
		t.Errorf("uncompressed: %v", err)
	}
	jobs, err := ParseGavelCompressed(PhillyTrace, data, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 607 {
		t.Fatalf("%d jobs, want 607", len(jobs))
	}
	// Line 1: Transformer (batch size 128), 6959399 steps at 5.7712 steps/s
	// on a V100 (1,205,882 s: 14 days), arriving at 0 on 8 GPUs; as
	// alexnet (13.7 ms an iteration), compressed 1000×: 88,020 iterations.
	first := jobs[0]
	alex, _ := models.Lookup("alexnet")
	wantIters := int(math.Round(6959399 / 5.771210833383417 / 1000 / alex.Compute.Seconds()))
	if first.ID != 0 || first.Model != "alexnet" || first.Workers != 8 || first.Arrival != 0 || first.Iterations != wantIters || first.Line != 1 {
		t.Errorf("first job %+v, want alexnet on 8 workers, %d iterations", first, wantIters)
	}
	// Line 2: Recommendation (batch size 8192) at 529666 s, compressed
	// 1000× to 529.666 s.
	if j := jobs[1]; j.Model != "googlenet" || j.Arrival != 529666*time.Millisecond || j.Workers != 1 {
		t.Errorf("second job %+v", j)
	}
	var gpuTime, span float64
	for _, j := range jobs {
		p, _ := models.Lookup(j.Model)
		gpuTime += float64(j.Iterations) * p.Compute.Seconds() * float64(j.Workers)
		span = max(span, j.Arrival.Seconds())
	}
	// The recovered run times are Philly's: about 4.1e8 GPU-seconds over
	// 98 days, 1000× shorter here.
	if gpuTime < 4.0e5 || gpuTime > 4.3e5 || span < 8400 || span > 8500 {
		t.Errorf("%.3g GPU-seconds over %.0f s", gpuTime, span)
	}
	shared := sharedPhilly(t)
	orig, err := os.ReadFile(filepath.Join(shared, "gavel-msr-seed0-e13805.trace"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(orig, data) {
		t.Error("traces/jobs/philly-e13805.trace differs from ../shared/traces/philly/gavel-msr-seed0-e13805.trace")
	}
	raw, err := os.ReadFile(filepath.Join(shared, "gavel-oracle_throughputs-6fb30f9.json"))
	if err != nil {
		t.Fatal(err)
	}
	var oracle map[string]map[string]map[string]json.RawMessage
	if err := json.Unmarshal(raw, &oracle); err != nil {
		t.Fatal(err)
	}
	if len(oracle["v100"]) != len(GavelThroughputs) {
		t.Errorf("%d V100 job types in Gavel's file, %d in GavelThroughputs", len(oracle["v100"]), len(GavelThroughputs))
	}
	for typ, m := range oracle["v100"] {
		var v float64
		if err := json.Unmarshal(m["null"], &v); err != nil || GavelThroughputs[typ] != v {
			t.Errorf("%s: Gavel measured %v steps/s, GavelThroughputs says %v", typ, v, GavelThroughputs[typ])
		}
	}
}

// TestPhillyCompressed: the jobs the ready spec replays (the copy of
// Gavel's file, compressed 1000× in time) are what 'tracebed trace convert
// --time-compression 1000' writes, and read back from its CSV unchanged.
func TestPhillyCompressed(t *testing.T) {
	data, err := fs.ReadFile(Samples, PhillyTrace)
	if err != nil {
		t.Fatal(err)
	}
	jobs, f, err := ParseCompressed(PhillyTrace, data, PhillyCompression)
	if err != nil || f != Gavel {
		t.Fatalf("%s format: %v", f, err)
	}
	direct, err := ParseGavelCompressed(PhillyTrace, data, PhillyCompression)
	if err != nil || !reflect.DeepEqual(jobs, direct) {
		t.Fatalf("ParseCompressed and ParseGavelCompressed differ (%v)", err)
	}
	var b bytes.Buffer
	if err := WriteCSV(&b, jobs, ConvertComment(PhillyTrace, Gavel, PhillyCompression)); err != nil {
		t.Fatal(err)
	}
	back, f, err := Parse("philly.csv", b.Bytes())
	if err != nil || f != CSV || len(back) != len(jobs) {
		t.Fatalf("the CSV reads back as %d %s jobs: %v", len(back), f, err)
	}
	for i := range back {
		back[i].Line = jobs[i].Line
	}
	if !reflect.DeepEqual(back, jobs) {
		t.Error("the CSV does not read back as the jobs written")
	}
	// Any other format is compressed after parsing: arrivals and
	// iterations divided.
	csv := []byte("arrival,model,workers,iterations\n100,vgg16,2,3000\n")
	js, f, err := ParseCompressed("t.csv", csv, 10)
	if err != nil || f != CSV || js[0].Arrival != 10*time.Second || js[0].Iterations != 300 {
		t.Errorf("CSV compressed 10×: %+v, %s, %v", js, f, err)
	}
	if _, _, err := ParseCompressed("t.csv", csv, 0.5); err == nil {
		t.Error("a compression below 1 was accepted")
	}
}

func TestGavelLayouts(t *testing.T) {
	cmd := "cd %s/x && python3 train.py"
	for _, tc := range []struct{ name, line string }{
		{"7 fields", "ResNet-50 (batch size 64)\t" + cmd + "\t--num_minibatches\t1\t5457\t120.5\t4"},
		{"9 fields", "ResNet-50 (batch size 64)\t" + cmd + "\t--num_minibatches\t1\t5457\t4\t1\t-1\t120.5"},
		{"10 fields", "ResNet-50 (batch size 64)\t" + cmd + "\t/work\t--num_minibatches\t1\t5457\t4\t1\t-1\t120.5"},
	} {
		jobs, f, err := Parse("g.trace", []byte(tc.line+"\n"))
		if err != nil || f != Gavel || len(jobs) != 1 {
			t.Fatalf("%s: %v", tc.name, err)
		}
		// 5457 steps at 5.4576 steps/s: 999.9 s on a V100, 12655
		// iterations of 79.012 ms.
		if j := jobs[0]; j.Model != "resnet50" || j.Workers != 4 || j.Arrival != 120500*time.Millisecond || j.Iterations != 12655 {
			t.Errorf("%s: %+v", tc.name, j)
		}
	}
	// Without the .trace extension, the content says it.
	if _, f, err := Parse("g.txt", []byte("A3C\tcmd\t--max-steps\t0\t100\t0\t1\n")); err != nil || f != Gavel {
		t.Errorf("detected %s, %v", f, err)
	}
}

// TestEveryProblem: a file with several bad lines and fields reports all of
// them, each with file:line:field.
func TestEveryProblem(t *testing.T) {
	for _, tc := range []struct {
		file, data string
		want       []string
	}{
		{"p.csv", "arrival,model,workers,iterations\nsoon,vgg16,0,10\n0,lenet,2,10\n0,vgg16,2,0\n",
			[]string{"p.csv:2: arrival:", "p.csv:2: workers:", "p.csv:3: model:", "p.csv:4: iterations:"}},
		{"p.jsonl", `{"arrival": 0, "model": "vgg16", "workers": 2, "workers": 4, "iterations": 5}` + "\n" +
			`{"arrival": "x", "model": "vgg16", "workers": 2, "iterations": 0}` + "\n{\n",
			[]string{"p.jsonl:1: workers: given 2 times", "p.jsonl:2: arrival:", "p.jsonl:2: iterations:", "p.jsonl:3: not a JSON object"}},
		{"p.csv", "job_id,num_gpu,submit_time,iterations,model_name\n1,x,0,5,vgg16\n2,2,-1,5,vgg16\n1,2,0,5,nope\n",
			[]string{"p.csv:2: num_gpu:", "p.csv:3: submit_time:", "p.csv:4: model_name:"}},
		{"p.trace", "Nope (batch size 3)\tc\t-n\t1\t10\t0\t1\nA3C\tc\t-n\t2\tx\t-5\t0\nA3C\tc\t-n\t1\t10\t0\n",
			[]string{"p.trace:1: job_type: \"Nope (batch size 3)\"", "p.trace:2: needs_data_dir:", "p.trace:2: total_steps:", "p.trace:2: arrival_time:", "p.trace:2: scale_factor:", "p.trace:3: 6 tab-separated fields"}},
	} {
		_, _, err := Parse(tc.file, []byte(tc.data))
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %v\nlacks %q", tc.file, err, w)
			}
		}
		var te *Error
		if !errors.As(err, &te) {
			t.Errorf("%s: %T is not a *jobtrace.Error", tc.file, err)
		}
	}
	// Past MaxProblems, problems are counted.
	var b strings.Builder
	b.WriteString("arrival,model,workers,iterations\n")
	for range MaxProblems + 5 {
		b.WriteString("0,vgg16,0,10\n")
	}
	_, _, err := Parse("many.csv", []byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), "… and 5 more problems") || strings.Count(err.Error(), "many.csv:") != MaxProblems {
		t.Errorf("many problems: %v", err)
	}
}

func TestCompress(t *testing.T) {
	jobs := []Job{{ID: 0, Arrival: 10 * time.Second, Model: "vgg16", Workers: 2, Iterations: 1000}, {ID: 1, Arrival: time.Hour, Model: "vgg16", Workers: 1, Iterations: 3}}
	got, err := Compress(jobs, 100)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Arrival != 100*time.Millisecond || got[0].Iterations != 10 || got[1].Arrival != 36*time.Second || got[1].Iterations != 1 {
		t.Errorf("%+v", got)
	}
	if jobs[0].Iterations != 1000 {
		t.Error("Compress changed its input")
	}
	for _, f := range []float64{0.5, math.NaN(), math.Inf(1)} {
		if _, err := Compress(jobs, f); err == nil {
			t.Errorf("factor %v accepted", f)
		}
	}
}

// FuzzParseGavel: whatever parses is valid and survives a write (as CSV)
// and a re-parse unchanged.
func FuzzParseGavel(f *testing.F) {
	f.Add([]byte("ResNet-50 (batch size 64)\tcmd\t--n\t1\t5457\t120.5\t4\n"))
	f.Add([]byte("A3C\tc\t-n\t0\t10\t0\t1\nLM (batch size 5)\tc\t-s\t1\t99\t3\t2\n"))
	// The real Philly trace's first lines (a few: the fuzzer minimizes
	// every interesting input, which takes long for a large one).
	if data, err := fs.ReadFile(Samples, PhillyTrace); err == nil {
		lines := bytes.SplitAfter(data, []byte("\n"))
		f.Add(bytes.Join(lines[:min(8, len(lines))], nil))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzRoundTrip(t, "fuzz.trace", data)
	})
}
