package jobtrace

import (
	"bytes"
	"errors"
	"io/fs"
	"math"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tracebed/tracebed/traces/models"
)

func TestSamplesAgree(t *testing.T) {
	csvData, err := fs.ReadFile(Samples, "sample.csv")
	if err != nil {
		t.Fatal(err)
	}
	jsonData, err := fs.ReadFile(Samples, "sample.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	a, fa, err := Parse("sample.csv", csvData)
	if err != nil {
		t.Fatal(err)
	}
	b, fb, err := Parse("sample.jsonl", jsonData)
	if err != nil {
		t.Fatal(err)
	}
	if fa != CSV || fb != JSONL {
		t.Fatalf("formats %s, %s; want csv, jsonl", fa, fb)
	}
	strip := func(js []Job) []Job {
		out := append([]Job(nil), js...)
		for i := range out {
			out[i].Line = 0
		}
		return out
	}
	if !reflect.DeepEqual(strip(a), strip(b)) {
		t.Errorf("sample.csv and sample.jsonl differ:\n%v\n%v", a, b)
	}
	if len(a) != 6 || a[4].Arrival != time.Minute || a[2].Arrival != 12500*time.Millisecond || a[1].Model != "vgg16" {
		t.Errorf("sample.csv parsed as %+v", a)
	}
}

// TestTiresias imports the embedded copy of the Tiresias 60-job trace and,
// when present, checks it is identical to ../shared/traces.
func TestTiresias(t *testing.T) {
	data, err := fs.ReadFile(Samples, "tiresias-60job.csv")
	if err != nil {
		t.Fatal(err)
	}
	jobs, f, err := Parse("tiresias-60job.csv", data)
	if err != nil {
		t.Fatal(err)
	}
	if f != Tiresias || len(jobs) != 60 {
		t.Fatalf("format %s, %d jobs; want tiresias, 60", f, len(jobs))
	}
	// First rows: 0,1,0,606,vgg19,164,30 and 1,8,30,133,vgg11,147,23.
	want0 := Job{ID: 0, Arrival: 0, Model: "vgg19", Workers: 1, Iterations: 606, Line: 2}
	want1 := Job{ID: 1, Arrival: 30 * time.Second, Model: "vgg11", Workers: 8, Iterations: 133, Line: 3}
	if jobs[0] != want0 || jobs[1] != want1 {
		t.Errorf("first jobs %+v %+v; want %+v %+v", jobs[0], jobs[1], want0, want1)
	}
	workers := map[int]int{}
	for i, j := range jobs {
		workers[j.Workers]++
		if i > 0 && j.Arrival < jobs[i-1].Arrival {
			t.Errorf("job %d arrives before job %d", j.ID, jobs[i-1].ID)
		}
	}
	for w := range workers {
		if w != 1 && w != 2 && w != 4 && w != 8 {
			t.Errorf("unexpected worker count %d", w)
		}
	}
	shared, err := os.ReadFile("../../../shared/traces/tiresias-60job.csv")
	if err != nil {
		t.Logf("skipping the comparison with ../shared/traces: %v", err)
		return
	}
	if !bytes.Equal(shared, data) {
		t.Errorf("traces/jobs/tiresias-60job.csv differs from ../shared/traces/tiresias-60job.csv")
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, file, data string
		want             string // substring of the error, including file:line: field
	}{
		{"empty csv", "t.csv", "", "t.csv:1: header: empty file"},
		{"unknown column", "t.csv", "arrival,model,workers,iterations,gpus\n", "t.csv:1: header: unknown column \"gpus\""},
		{"missing column", "t.csv", "arrival,model,workers\n0,vgg16,2\n", "t.csv:1: header: no \"iterations\" column"},
		{"duplicate column", "t.csv", "arrival,model,model,workers,iterations\n", "t.csv:1: header: column \"model\" appears twice"},
		{"bad arrival", "t.csv", "arrival,model,workers,iterations\n0,vgg16,2,10\nsoon,vgg16,2,10\n", "t.csv:3: arrival: \"soon\""},
		{"negative arrival", "t.csv", "arrival,model,workers,iterations\n-1,vgg16,2,10\n", "t.csv:2: arrival:"},
		{"nan arrival", "t.csv", "arrival,model,workers,iterations\nNaN,vgg16,2,10\n", "t.csv:2: arrival:"},
		{"unknown model", "t.csv", "arrival,model,workers,iterations\n0,lenet,2,10\n", "t.csv:2: model: unknown model \"lenet\""},
		{"zero workers", "t.csv", "arrival,model,workers,iterations\n0,vgg16,0,10\n", "t.csv:2: workers: 0; want 1 to 4096"},
		{"fractional workers", "t.csv", "arrival,model,workers,iterations\n0,vgg16,2.5,10\n", "t.csv:2: workers:"},
		{"zero iterations", "t.csv", "arrival,model,workers,iterations\n0,vgg16,2,0\n", "t.csv:2: iterations: 0"},
		{"short row", "t.csv", "arrival,model,workers,iterations\n0,vgg16,2\n", "t.csv:2: 3 fields; the header has 4"},
		{"duplicate id", "t.csv", "id,arrival,model,workers,iterations\n1,0,vgg16,2,5\n1,3,vgg16,2,5\n", "t.csv:3: id: job id 1 is used twice (first on line 2)"},
		{"bare quote", "t.csv", "arrival,model,workers,iterations\n0,\"vgg16,2,5\n", "t.csv:2:"},
		{"no jobs", "t.csv", "arrival,model,workers,iterations\n", "t.csv:1: no jobs"},
		{"comment lines count", "t.csv", "# c\narrival,model,workers,iterations\n# c\n0,vgg16,x,5\n", "t.csv:4: workers:"},
		{"jsonl syntax", "t.jsonl", "{\"arrival\": 0, \"model\": \"vgg16\", \"workers\": 2, \"iterations\": 5}\n{\"arrival\": 0,\n", "t.jsonl:2: not a JSON object"},
		{"jsonl unknown key", "t.jsonl", "\n{\"arrival\": 0, \"model\": \"vgg16\", \"workers\": 2, \"iterations\": 5, \"gpus\": 1}\n", "t.jsonl:2: gpus: unknown key"},
		{"jsonl missing", "t.jsonl", "{\"arrival\": 0, \"model\": \"vgg16\", \"iterations\": 5}\n", "t.jsonl:1: workers: missing"},
		{"jsonl wrong type", "t.jsonl", "{\"arrival\": [1], \"model\": \"vgg16\", \"workers\": 2, \"iterations\": 5}\n", "t.jsonl:1: arrival: [1]: want a number or a string"},
		{"jsonl trailing", "t.jsonl", "{\"arrival\": 0, \"model\": \"vgg16\", \"workers\": 2, \"iterations\": 5} 7\n", "t.jsonl:1: text after the JSON object"},
		{"jsonl null", "t.jsonl", "null\n", "t.jsonl:1: want a JSON object"},
		{"jsonl bad model", "t.jsonl", "{\"arrival\": 0, \"model\": 3, \"workers\": 2, \"iterations\": 5}\n", "t.jsonl:1: model: unknown model \"3\""},
		{"tiresias bad gpu", "t.csv", "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n0,x,0,5,vgg16,1,1\n", "t.csv:2: num_gpu:"},
		{"tiresias bad duration", "t.csv", "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n0,2,0,5,vgg16,long,1\n", "t.csv:2: duration:"},
		{"tiresias missing column", "t.csv", "job_id,num_gpu,submit_time,model_name\n", "t.csv:1: header: no \"iterations\" column"},
		{"tiresias duplicate id", "t.csv", "job_id,num_gpu,submit_time,iterations,model_name\n4,2,0,5,vgg16\n4,2,0,5,vgg16\n", "t.csv:3: job_id: job id 4 is used twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := Parse(tt.file, []byte(tt.data))
			if err == nil {
				t.Fatalf("no error; want %q", tt.want)
			}
			var te *Error
			if !errors.As(err, &te) {
				t.Errorf("error %T is not a *jobtrace.Error", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q; want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestArrivalSpellings(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"0": 0, "12": 12 * time.Second, "12.5": 12500 * time.Millisecond, "0.000000001": 1,
		"1m30s": 90 * time.Second, "2h": 2 * time.Hour, "1e3": 1000 * time.Second, " 7 ": 7 * time.Second,
	} {
		got, err := parseArrival(in)
		if err != nil || got != want {
			t.Errorf("parseArrival(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	mix, err := Mix("mixed")
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := Generate(GenParams{
		Jobs: 50, MeanInterarrival: 7 * time.Second, Models: mix, Seed: 3,
		Workers: []Choice[int]{{2, 1}, {4, 2}, {8, 1}}, GPUTime: [2]time.Duration{time.Minute, time.Hour},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct {
		file  string
		write func(*bytes.Buffer, []Job) error
	}{
		{"rt.csv", func(b *bytes.Buffer, j []Job) error { return WriteCSV(b, j) }},
		{"rt.jsonl", func(b *bytes.Buffer, j []Job) error { return WriteJSONL(b, j) }},
	} {
		var b bytes.Buffer
		if err := w.write(&b, jobs); err != nil {
			t.Fatal(err)
		}
		back, _, err := Parse(w.file, b.Bytes())
		if err != nil {
			t.Fatalf("%s: %v\n%s", w.file, err, b.String())
		}
		for i := range back {
			back[i].Line = 0
		}
		if !reflect.DeepEqual(back, jobs) {
			t.Errorf("%s: round trip changed the jobs", w.file)
		}
	}
}

func TestGenerate(t *testing.T) {
	vision, _ := Mix("vision")
	p := GenParams{
		Jobs: 2000, MeanInterarrival: 10 * time.Second, Models: vision, Seed: 1,
		Workers: []Choice[int]{{2, 1}, {8, 3}}, GPUTime: [2]time.Duration{10 * time.Minute, 10 * time.Minute},
	}
	a, err := Generate(p)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Generate(p)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same seed, different traces")
	}
	p.Seed = 2
	if c, _ := Generate(p); reflect.DeepEqual(a, c) {
		t.Fatal("different seeds, same trace")
	}
	// Poisson arrivals: the mean gap is near 10 s (2000 samples: the
	// standard error is 10/sqrt(1999) ≈ 0.22 s, allow 5 of them).
	mean := a[len(a)-1].Arrival.Seconds() / float64(len(a)-1)
	if math.Abs(mean-10) > 1.1 {
		t.Errorf("mean interarrival %.2f s; want 10 ± 1.1", mean)
	}
	eight := 0
	for _, j := range a {
		if j.Workers == 8 {
			eight++
		}
		prof, _ := models.Lookup(j.Model)
		if prof.Family != models.Vision {
			t.Fatalf("vision mix drew %s", j.Model)
		}
		// GPU time is fixed at 10 min: iterations × compute within half an iteration.
		if got := float64(j.Iterations) * prof.Compute.Seconds(); math.Abs(got-600) > prof.Compute.Seconds()/2+1e-9 {
			t.Fatalf("%s: %d iterations × %v = %.1f s of GPU time; want 600", j.Model, j.Iterations, prof.Compute, got)
		}
	}
	if f := float64(eight) / float64(len(a)); math.Abs(f-0.75) > 0.05 {
		t.Errorf("fraction of 8-worker jobs %.3f; want 0.75 ± 0.05", f)
	}
}

func TestGenerateErrors(t *testing.T) {
	good := GenParams{Jobs: 1, Models: []Choice[string]{{"vgg16", 1}}, Workers: []Choice[int]{{2, 1}}, GPUTime: [2]time.Duration{1, 2}}
	for name, mod := range map[string]func(*GenParams){
		"jobs":                    func(p *GenParams) { p.Jobs = 0 },
		"model":                   func(p *GenParams) { p.Models = []Choice[string]{{"lenet", 1}} },
		"zero weights":            func(p *GenParams) { p.Workers = []Choice[int]{{2, 0}} },
		"neg weight":              func(p *GenParams) { p.Workers = []Choice[int]{{2, -1}, {4, 2}} },
		"weights sum to infinity": func(p *GenParams) { p.Workers = []Choice[int]{{2, math.MaxFloat64}, {4, math.MaxFloat64}} },
		"workers":                 func(p *GenParams) { p.Workers = []Choice[int]{{0, 1}} },
		"gpu time":                func(p *GenParams) { p.GPUTime = [2]time.Duration{3, 2} },
		"no models":               func(p *GenParams) { p.Models = nil },
	} {
		p := good
		mod(&p)
		if _, err := Generate(p); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := Generate(good); err != nil {
		t.Errorf("good params: %v", err)
	}
	if _, err := Mix("cartoons"); err == nil {
		t.Error("unknown mix accepted")
	}
}

func FuzzParseCSV(f *testing.F) {
	for _, name := range []string{"sample.csv", "tiresias-60job.csv"} {
		data, _ := fs.ReadFile(Samples, name)
		f.Add(data)
	}
	f.Add([]byte("arrival,model,workers,iterations\n1m,vgg16,2,3\n"))
	f.Fuzz(func(t *testing.T, data []byte) { fuzzRoundTrip(t, "f.csv", data) })
}

func FuzzParseJSONL(f *testing.F) {
	data, _ := fs.ReadFile(Samples, "sample.jsonl")
	f.Add(data)
	f.Add([]byte(`{"arrival": "1h", "model": "gpt2", "workers": 1, "iterations": 1e2}`))
	f.Fuzz(func(t *testing.T, data []byte) { fuzzRoundTrip(t, "f.jsonl", data) })
}

func FuzzParseTiresias(f *testing.F) {
	data, _ := fs.ReadFile(Samples, "tiresias-60job.csv")
	f.Add(data)
	f.Fuzz(func(t *testing.T, data []byte) {
		jobs, err := ParseTiresias("f.csv", data)
		if err != nil {
			return
		}
		checkJobs(t, jobs)
	})
}

// fuzzRoundTrip parses data; whatever parses must be valid and survive a
// write and a re-parse unchanged.
func fuzzRoundTrip(t *testing.T, file string, data []byte) {
	jobs, _, err := Parse(file, data)
	if err != nil {
		var te *Error
		if !errors.As(err, &te) {
			t.Fatalf("error %T %v is not a *jobtrace.Error", err, err)
		}
		return
	}
	checkJobs(t, jobs)
	var b bytes.Buffer
	if err := WriteCSV(&b, jobs); err != nil {
		t.Fatal(err)
	}
	back, err := ParseCSV("back.csv", b.Bytes())
	if err != nil {
		t.Fatalf("re-parse: %v\n%s", err, b.String())
	}
	for i := range back {
		back[i].Line = jobs[i].Line
	}
	if !reflect.DeepEqual(back, jobs) {
		t.Fatalf("round trip changed the jobs:\n%v\n%v", jobs, back)
	}
}

func checkJobs(t *testing.T, jobs []Job) {
	for i, j := range jobs {
		if _, ok := models.Lookup(j.Model); !ok || j.Workers < 1 || j.Iterations < 1 || j.Arrival < 0 {
			t.Fatalf("invalid job accepted: %+v", j)
		}
		if i > 0 && j.Arrival < jobs[i-1].Arrival {
			t.Fatalf("jobs out of arrival order")
		}
	}
}
