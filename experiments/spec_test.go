package experiments

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tracebed/tracebed/analysis"
	"github.com/tracebed/tracebed/internal/problems"
	"github.com/tracebed/tracebed/internal/yamlx"
)

// fakeKind is a kind whose runs compute metrics from their identity, or fail
// or panic on request.
type fakeKind struct{}

func (fakeKind) Name() string { return "fake" }

type fakeParams struct {
	Value float64 `yaml:"value"`
	Fail  bool    `yaml:"fail"`
	Panic bool    `yaml:"panic"`
}

type fakeExp struct{ sc map[string]fakeParams }

func (fakeKind) Compile(s *Spec) (Experiment, error) {
	var base fakeParams
	if err := s.DecodeWorkload(&base); err != nil {
		return nil, err
	}
	e := &fakeExp{sc: map[string]fakeParams{}}
	for _, sc := range s.Scenarios {
		p := base
		if err := s.DecodeEntry(sc, &p); err != nil {
			return nil, err
		}
		if p.Value < 0 {
			return nil, EntryError(s, sc, "value", "negative")
		}
		e.sc[sc.Name] = p
	}
	return e, nil
}

func (e *fakeExp) Metrics() []analysis.MetricInfo {
	return []analysis.MetricInfo{{Name: "v", Better: analysis.Higher}, {Name: "seed"}}
}

func (e *fakeExp) Run(_ context.Context, r Run) (*analysis.Run, error) {
	p := e.sc[r.Scenario]
	if p.Fail {
		return nil, errors.New("asked to fail")
	}
	if p.Panic {
		panic("asked to panic")
	}
	r.Progress(0.5)
	return &analysis.Run{Metrics: analysis.Metrics{"v": p.Value * float64(len(r.Policy)), "seed": float64(r.Seed)}}, nil
}

const goodSpec = `name: demo
kind: fake
seeds: [3, 1, 2]
topology: star
workload: {value: 1.5}
policies: [a, {name: bb}]
scenarios:
  - {name: one}
  - {name: two, value: 2}
`

func TestParseSpec(t *testing.T) {
	s, err := ParseSpec("demo.yaml", []byte(goodSpec), nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "demo" || s.Substrate != "sim" || s.Scale != 1 || len(s.Seeds) != 3 || s.Topology == nil || len(s.Topology.Hosts()) != 16 {
		t.Fatalf("%+v", s)
	}
	if len(s.Policies) != 2 || s.Policies[1].Name != "bb" || len(s.Scenarios) != 2 {
		t.Fatalf("policies %+v scenarios %+v", s.Policies, s.Scenarios)
	}
}

func TestBadSpecs(t *testing.T) {
	tests := []struct {
		name, yaml string
		line       int
		field, msg string
	}{
		{"missing kind", "policies: [a]\n", 1, "kind", "missing"},
		{"unknown field", "kind: fake\npolicies: [a]\nseed: 4\n", 3, "seed", "unknown field"},
		{"bad substrate", "kind: fake\npolicies: [a]\nsubstrate: docker\n", 3, "substrate", "not a substrate"},
		{"seeds type", "kind: fake\npolicies: [a]\nseeds: [one]\n", 3, "seeds[0]", "not a whole number"},
		{"dup seed", "kind: fake\npolicies: [a]\nseeds: [1, 1]\n", 3, "seeds", "twice"},
		{"scale", "kind: fake\npolicies: [a]\nscale: 0.5\n", 3, "scale", "must be 1 to"},
		{"huge scale", "kind: fake\npolicies: [a]\nscale: 1e30\n", 3, "scale", "must be 1 to"},
		{"bmv2 scale", "kind: fake\npolicies: [a]\nbmv2_scale: 0.5\n", 3, "bmv2_scale", "must be 1 to"},
		{"huge bmv2 scale", "kind: fake\npolicies: [a]\nbmv2_scale: 1e30\n", 3, "bmv2_scale", "must be 1 to"},
		{"no scenarios", "kind: fake\npolicies: [a]\nscenarios: []\n", 3, "scenarios", "nothing would run"},
		{"no seeds", "kind: fake\npolicies: [a]\nseeds: []\n", 3, "seeds", "empty"},
		{"long name", "kind: fake\npolicies: [a]\nname: " + strings.Repeat("x", 1<<20) + "\n", 3, "name", "…"},
		{"no policies", "kind: fake\npolicies: []\n", 2, "policies", "empty"},
		{"dup policy", "kind: fake\npolicies: [a, a]\n", 2, "policies[1].name", "twice"},
		{"policy no name", "kind: fake\npolicies: [{x: 1}]\n", 2, "policies[0].name", "missing"},
		{"topology missing file", "kind: fake\npolicies: [a]\ntopology: nowhere.yaml\n", 3, "topology", "no such file"},
		{"topology empty", "kind: fake\npolicies: [a]\ntopology: ''\n", 3, "topology", "empty"},
		{"topology a directory", "kind: fake\npolicies: [a]\ntopology: .\n", 3, "topology", "not a regular file"},
		{"topology generate", "kind: fake\npolicies: [a]\ntopology: {generate: ring}\n", 3, "topology.generate", "not a generator"},
		{"topology negative", "kind: fake\npolicies: [a]\ntopology: {generate: star, rate: -1G}\n", 3, "topology.rate", "positive"},
		{"inline topology", "kind: fake\npolicies: [a]\ntopology:\n  topology:\n    nodes: {h: {kind: hst}}\n    links: []\n", 5, "topology.topology.nodes.h.kind", "not a node kind"},
		{"syntax", "kind: fake\npolicies: [a\n", 2, "", "YAML syntax"},
		{"workload type", "kind: fake\npolicies: [a]\nworkload: {value: high}\n", 3, "workload.value", "not a number"},
		{"scenario check", "kind: fake\npolicies: [a]\nscenarios: [{name: s, value: -1}]\n", 3, "scenarios[0].value", "negative"},
		{"unknown kind", "kind: nope\npolicies: [a]\n", 1, "kind", "not a kind"},
	}
	reg := NewRegistry(fakeKind{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := ParseSpec("bad.yaml", []byte(tt.yaml), nil)
			if err == nil {
				_, err = reg.Compile(s)
			}
			if err == nil {
				t.Fatal("accepted")
			}
			var e *yamlx.Error
			if !errors.As(err, &e) {
				t.Fatalf("%T %v is not an input error", err, err)
			}
			if e.Pos.File != "bad.yaml" || e.Pos.Line != tt.line || e.Field != tt.field || !strings.Contains(e.Msg, tt.msg) {
				t.Errorf("got %q (line %d, field %q); want line %d, field %q, %q", err, e.Pos.Line, e.Field, tt.line, tt.field, tt.msg)
			}
		})
	}
}

func execute(t *testing.T, spec string) (*analysis.Results, error) {
	t.Helper()
	s, err := ParseSpec("demo.yaml", []byte(spec), nil)
	if err != nil {
		t.Fatal(err)
	}
	exp, err := NewRegistry(fakeKind{}).Compile(s)
	if err != nil {
		t.Fatal(err)
	}
	return Execute(context.Background(), s, exp, Options{Parallel: 4, Version: "test", Progress: progressFunc(func(done, total float64) {
		if done > total {
			t.Errorf("progress %v of %v", done, total)
		}
	})})
}

type progressFunc func(done, total float64)

func (f progressFunc) Update(done, total float64) { f(done, total) }

func TestExecuteCanonicalOrder(t *testing.T) {
	res, err := execute(t, goodSpec)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Runs) != 2*2*3 {
		t.Fatalf("%d runs", len(res.Runs))
	}
	var order []string
	for _, r := range res.Runs {
		order = append(order, r.Scenario+"/"+r.Policy+"/"+analysis.FormatValue(r.Metrics["seed"]))
	}
	want := "one/a/1 one/a/2 one/a/3 one/bb/1 one/bb/2 one/bb/3 two/a/1 two/a/2 two/a/3 two/bb/1 two/bb/2 two/bb/3"
	if strings.Join(order, " ") != want {
		t.Fatalf("order %v", order)
	}
	if r := res.Runs[6]; r.Metrics["v"] != 2 || r.Seed != 1 {
		t.Errorf("two/a/1 = %+v", r)
	}
	a, _ := res.Marshal()
	res2, _ := execute(t, goodSpec)
	b, _ := res2.Marshal()
	if string(a) != string(b) {
		t.Error("two executions of one spec give different results.json")
	}
}

func TestRunFailuresAreReported(t *testing.T) {
	for _, tt := range []struct{ flag, msg string }{{"fail", "asked to fail"}, {"panic", "panic: asked to panic"}} {
		_, err := execute(t, "kind: fake\npolicies: [a]\nscenarios: [{name: ok}, {name: bad, "+tt.flag+": true}]\n")
		var re *RunError
		if !errors.As(err, &re) || re.Run.Scenario != "bad" || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%s: got %v", tt.flag, err)
		}
	}
}

func FuzzParseSpec(f *testing.F) {
	f.Add([]byte(goodSpec))
	for _, name := range ReadyFiles() {
		data, _ := ready.ReadFile(name)
		f.Add(data)
	}
	f.Add([]byte("kind: fake\npolicies: [{name: a, <<: {x: 1}}]\nscenarios: &s [{name: q}]\n"))
	reg := NewRegistry(fakeKind{})
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseSpec("fuzz.yaml", data, nil)
		if err == nil {
			_, err = reg.Compile(s)
		}
		for _, e := range problems.Split(err) {
			if !yamlx.IsInputError(e) {
				t.Fatalf("problem without a position: %v", e)
			}
		}
	})
}

func TestSuites(t *testing.T) {
	def, err := Suite("sim", nil)
	if err != nil {
		t.Fatal(err)
	}
	real, err := Suite("netns", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(def) == 0 || len(real) == 0 {
		t.Fatalf("%d default specs, %d netns specs", len(def), len(real))
	}
	for _, s := range def {
		if !s.Default || s.Substrate != "sim" {
			t.Errorf("default suite holds %s (default %v, substrate %s)", s.Name, s.Default, s.Substrate)
		}
	}
	for _, s := range real {
		if s.Substrate != "netns" {
			t.Errorf("netns suite holds %s on %s", s.Name, s.Substrate)
		}
	}
}

func TestParseSpecReportsEveryProblem(t *testing.T) {
	spec := "name: 'bad name'\nkind: fake\nsubstrate: moon\nseeds: [1, 1]\nscale: 0.5\npolicies: [a, a, '']\nscenarios: [x, {value: 1}, x]\n"
	_, err := ParseSpec("p.yaml", []byte(spec), nil)
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{
		"p.yaml:1:7: name:", "p.yaml:3:12: substrate:", "p.yaml:4:8: seeds: seed 1 is listed twice", "p.yaml:5:8: scale:",
		"p.yaml:6:15: policies[1].name: \"a\" is listed twice", "policies[2].name: missing",
		"scenarios[1].name: missing", "scenarios[2].name: \"x\" is listed twice",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if !yamlx.IsInputError(err) {
		t.Error("not an input error")
	}
	// A name of a megabyte is not echoed whole.
	_, err = ParseSpec("p.yaml", []byte("name: '"+strings.Repeat("é", 1<<19)+"'\nkind: fake\npolicies: [a]\n"), nil)
	if err == nil || len(err.Error()) > 300 {
		t.Errorf("long name: error of %d bytes", len(err.Error()))
	}
}

func TestManyScenariosValidateQuickly(t *testing.T) {
	var b strings.Builder
	b.WriteString("kind: fake\npolicies: [a]\nscenarios:\n")
	for i := range 50000 {
		fmt.Fprintf(&b, "  - s%d\n", i)
	}
	s, err := ParseSpec("many.yaml", []byte(b.String()), nil)
	if err != nil || len(s.Scenarios) != 50000 {
		t.Fatalf("%v", err)
	}
}

func TestFindLooksNextToTheSpecFirst(t *testing.T) {
	specDir, work := t.TempDir(), t.TempDir()
	for dir, content := range map[string]string{specDir: "next to the spec", work: "in the working directory"} {
		if err := os.WriteFile(filepath.Join(dir, "t.csv"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(work, "only.csv"), []byte("only here"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(work)
	s := &Spec{File: filepath.Join(specDir, "s.yaml"), readFile: func(p string) ([]byte, error) {
		if p == "built/in.csv" {
			return []byte("built in"), nil
		}
		return nil, fs.ErrNotExist
	}}
	for path, want := range map[string]string{"t.csv": "next to the spec", "only.csv": "only here", "built/in.csv": "built in"} {
		got, err := s.ReadFile(path)
		if err != nil || string(got) != want {
			t.Errorf("ReadFile(%s) = %q, %v; want %q", path, got, err, want)
		}
	}
	if _, err := s.Find("nowhere.csv"); err == nil || !strings.Contains(err.Error(), "next to "+s.File) {
		t.Errorf("missing file: %v", err)
	}
	if err := os.WriteFile(filepath.Join(specDir, "b.lackey"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(specDir, "a.lackey"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := s.Glob("*.lackey")
	if err != nil || len(got) != 2 || filepath.Base(got[0]) != "a.lackey" || filepath.Dir(got[0]) != specDir {
		t.Errorf("Glob = %v, %v", got, err)
	}
	if _, err := s.Glob("*.none"); err == nil {
		t.Error("a pattern matching nothing is accepted")
	}
}
