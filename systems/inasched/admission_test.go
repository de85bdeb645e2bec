package inasched_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tracebed/tracebed/systems/dynaina"
	"github.com/tracebed/tracebed/systems/inasched"
)

var update = flag.Bool("update", false, "rewrite the transcripts' expected output")

// TestAdmissionTranscripts replays the scripts in testdata/admission, in
// the style of etcd raft's data-driven tests: each command is a line,
// followed by "----" and what the admission answers; -update rewrites the
// answers.
//
//	policy dynaina mem=tor:200 [priority=…] [share=false]   or   policy fixed mem=…
//	admit id=1 workers=4 compute=90ms comm=10ms ring=20ms demand=100 [useful=60] [switch=tor] [lower=leaf1,leaf2] [at=0]
//	bind id=1 mode=pool pool=0 base=0 size=100             (policy fixed: the next plan of job 1)
//	begin id=1 [at=5]      end id=1      depart id=1 [at=9]      state
func TestAdmissionTranscripts(t *testing.T) {
	files, err := filepath.Glob("testdata/admission/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) { runTranscript(t, f) })
	}
}

type step struct {
	comment   []string // lines before the command starting with #
	cmd, want string
	line      int
}

func parseTranscript(t *testing.T, file string) []step {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var steps []step
	var comment []string
	lines := strings.Split(string(data), "\n")
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if strings.HasPrefix(l, "#") {
			comment = append(comment, l)
		}
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		s := step{cmd: l, line: i + 1, comment: comment}
		comment = nil
		if i+1 >= len(lines) || strings.TrimSpace(lines[i+1]) != "----" {
			t.Fatalf("%s:%d: %q is not followed by ----", file, i+1, l)
		}
		i += 2
		var out []string
		for ; i < len(lines) && strings.TrimSpace(lines[i]) != ""; i++ {
			out = append(out, lines[i])
		}
		s.want = strings.Join(out, "\n")
		steps = append(steps, s)
	}
	return steps
}

// fixed is a policy whose bindings the script sets.
type fixed struct{ b map[int]inasched.Binding }

func (f *fixed) Name() string                      { return "fixed" }
func (f *fixed) Admit(time.Duration, inasched.Job) {}
func (f *fixed) Depart(_ time.Duration, id int)    { delete(f.b, id) }
func (f *fixed) Priority(id int) float64           { return float64(-id) }
func (f *fixed) Binding(_ time.Duration, id int) inasched.Binding {
	if b, ok := f.b[id]; ok {
		return b
	}
	return inasched.RingBinding
}

type transcript struct {
	adm   *inasched.Admission[time.Duration]
	fixed *fixed
	jobs  map[int]inasched.Job
}

func runTranscript(t *testing.T, file string) {
	steps := parseTranscript(t, file)
	tr := &transcript{jobs: map[int]inasched.Job{}}
	var b strings.Builder
	for _, s := range steps {
		got, err := tr.do(s.cmd)
		if err != nil {
			got = "error: " + err.Error()
		}
		if got == "" {
			got = "ok"
		}
		if !*update && got != s.want {
			t.Errorf("%s:%d: %s\ngot:\n%s\nwant:\n%s", file, s.line, s.cmd, got, s.want)
		}
		for _, c := range s.comment {
			fmt.Fprintln(&b, c)
		}
		fmt.Fprintf(&b, "%s\n----\n%s\n\n", s.cmd, got)
	}
	if *update {
		if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func args(fields []string) map[string]string {
	m := map[string]string{}
	for _, f := range fields {
		k, v, _ := strings.Cut(f, "=")
		m[k] = v
	}
	return m
}

func (tr *transcript) do(cmd string) (string, error) {
	f := strings.Fields(cmd)
	a := args(f[1:])
	num := func(k string) int {
		n, _ := strconv.Atoi(a[k])
		return n
	}
	dur := func(k string) time.Duration {
		d, _ := time.ParseDuration(a[k])
		return d
	}
	at := dur("at")
	switch f[0] {
	case "policy":
		mem := inasched.Memory{}
		for _, kv := range strings.Split(a["mem"], ",") {
			k, v, _ := strings.Cut(kv, ":")
			n, err := strconv.Atoi(v)
			if err != nil {
				return "", fmt.Errorf("mem %q", a["mem"])
			}
			mem[k] = n
		}
		var s inasched.Scheduler
		switch f[1] {
		case "fixed":
			tr.fixed = &fixed{b: map[int]inasched.Binding{}}
			s = tr.fixed
		case "dynaina":
			p := dynaina.DefaultParams
			if v, ok := a["priority"]; ok {
				p.Priority = v
			}
			if a["share"] == "false" {
				p.Share = false
			}
			var err error
			if s, err = dynaina.New(p, mem, 1); err != nil {
				return "", err
			}
		default:
			return "", fmt.Errorf("unknown policy %q", f[1])
		}
		tr.adm = inasched.NewAdmission[time.Duration](inasched.NewController(s, nil))
		return "", nil
	case "admit":
		j := inasched.Job{ID: num("id"), Workers: num("workers"), Switch: "tor", Arrival: at, Model: "m",
			Compute: dur("compute"), CommINA: dur("comm"), CommRing: dur("ring"), Demand: num("demand"), Useful: num("useful"), Gradient: int64(num("gradient"))}
		if v, ok := a["switch"]; ok {
			j.Switch = v
		}
		if v, ok := a["lower"]; ok {
			j.Lower = strings.Split(v, ",")
		}
		if j.Useful == 0 {
			j.Useful = 1
		}
		if j.Gradient == 0 {
			j.Gradient = 1e8
		}
		tr.jobs[j.ID] = j
		acts, err := tr.adm.Admit(at, at, j, nil)
		return show(acts), err
	case "bind":
		mode := map[string]inasched.Mode{"ring": inasched.Ring, "pool": inasched.Pool, "shared": inasched.Shared}[a["mode"]]
		tr.fixed.b[num("id")] = inasched.Binding{Mode: mode, Pool: num("pool"), Base: num("base"), Size: num("size")}
		return "", nil
	case "begin":
		act, err := tr.adm.Begin(at, at, num("id"))
		if err != nil {
			return "", err
		}
		return act.String(), nil
	case "end":
		return show(tr.adm.End(num("id"))), nil
	case "depart":
		acts, err := tr.adm.Depart(at, at, num("id"))
		delete(tr.jobs, num("id"))
		return show(acts), err
	case "state":
		var ids []int
		for id := range tr.jobs {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		var out []string
		for _, id := range ids {
			b, holds := tr.adm.Holds(id)
			out = append(out, fmt.Sprintf("job %d: %v holds=%v", id, b, holds))
		}
		return strings.Join(out, "\n"), nil
	}
	return "", fmt.Errorf("unknown command %q", f[0])
}

func show(acts []inasched.Action) string {
	var out []string
	for _, a := range acts {
		out = append(out, a.String())
	}
	return strings.Join(out, "\n")
}
