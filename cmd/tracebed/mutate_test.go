package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/tracebed/tracebed/experiments"
	memtrace "github.com/tracebed/tracebed/traces/mem"
)

var (
	mutants    = flag.Int("mutate.n", 150, "TestMutants: how many mutants of the ready inputs to validate")
	mutantRuns = flag.Int("mutate.runs", 4, "TestMutants: how many mutants that validate to run")
	mutateSeed = flag.Uint64("mutate.seed", 1, "TestMutants: the seed of the mutations")
	mutateDir  = flag.String("mutate.dir", "", "TestMutants: write the mutants into this directory and keep them (default: a temporary one)")
)

// mutationLimits are the limits TestMutants validates mutants against
// before running some: small enough that what validates runs in seconds,
// so the run phase tells a hang from a long run.
var mutationLimits = experiments.Limits{Memory: 1 << 30, Events: 3e6}

// mutationRunBound is how long a run of a mutant may take before the test
// calls it a hang: a bound against hangs, far above what mutationLimits
// allow on a loaded machine, not a performance target.
const mutationRunBound = 2 * time.Minute

// TestMutants mutates the ready specs, topologies and traces — deletions,
// type swaps, extreme numbers, unknown names, missing units, duplicates,
// truncation, garbage — and checks, for every mutant, that validate exits
// 0 or 2 (never 1, which is an internal error, and never panics) and that
// every refusal names a file and a line; then it runs a sample of the
// mutants that validate (one run each, chosen at random: specs as they
// are, topologies and traces inside a small spec) and checks each finishes,
// with results or an error, within a bound. The seed and the budget are
// fixed (-mutate.seed, -mutate.n, -mutate.runs), so make test runs the same
// mutants every time in about half a minute; a longer search:
//
//	go test ./cmd/tracebed -run TestMutants -mutate.n 5000 -mutate.runs 200 -timeout 2h -v
//
// or 'make fuzz-inputs' (docs/reliability.md).
func TestMutants(t *testing.T) {
	t.Setenv(memtrace.CacheDirEnv, t.TempDir()) // converted traces go here, not to the user's cache
	seeds := mutationSeeds(t)
	r := rand.New(rand.NewPCG(*mutateSeed, 0x6d7574))
	dir := *mutateDir
	if dir == "" {
		dir = t.TempDir()
	}
	var ran, accepted, refused int
	outcomes := map[string][2]int{} // operator → accepted, refused
	var runnable []string
	for i := range *mutants {
		seed := seeds[r.IntN(len(seeds))]
		data, op := mutate(r, seed)
		path := filepath.Join(dir, fmt.Sprintf("m%05d", i), filepath.Base(seed.path))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		code, stderr := validateMutant(t, path)
		o := outcomes[op]
		switch code {
		case exitOK:
			accepted++
			o[0]++
			runnable = append(runnable, path)
		case exitBadInput:
			refused++
			o[1]++
			if !fileLine.MatchString(stderr) {
				t.Errorf("%s (%s of %s): refused without a file and line:\n%s", path, op, seed.path, stderr)
			}
		default:
			t.Errorf("%s (%s of %s): validate exited %d:\n%s", path, op, seed.path, code, stderr)
		}
		outcomes[op] = o
	}
	// Runs: a sample of what validated, under limits small enough that a
	// run takes seconds.
	r.Shuffle(len(runnable), func(i, j int) { runnable[i], runnable[j] = runnable[j], runnable[i] })
	for _, path := range runnable {
		if ran == *mutantRuns {
			break
		}
		if runMutant(t, r, path) {
			ran++
		}
	}
	var ops []string
	for op := range outcomes {
		ops = append(ops, op)
	}
	slices.Sort(ops)
	var summary strings.Builder
	for _, op := range ops {
		fmt.Fprintf(&summary, "  %-14s %4d accepted %4d refused\n", op, outcomes[op][0], outcomes[op][1])
	}
	t.Logf("%d mutants: %d accepted, %d refused with file:line; %d of the accepted ran to the end\n%s", *mutants, accepted, refused, ran, summary.String())
}

// fileLine matches "FILE:LINE" at the start of an error message, or for a
// binary trace, which has no lines, "FILE: ... byte OFFSET".
var fileLine = regexp.MustCompile(`(?m)^tracebed: (\S+:\d+[:\s]|\S+\.memtrace: (\w+ )*(at )?byte \d+)`)

// mutationSeed is a file mutants are made from.
type mutationSeed struct {
	path string
	data []byte
	yaml bool
}

// mutationSeeds are the ready specs, topologies and traces.
func mutationSeeds(t *testing.T) []mutationSeed {
	t.Helper()
	var seeds []mutationSeed
	for _, pattern := range []string{"../../experiments/*.yaml", "../../topologies/*.yaml", "../../traces/jobs/*.csv", "../../traces/jobs/*.jsonl", "../../traces/jobs/*.trace", "../../traces/mem/samples/*", "testdata/small-*.yaml"} {
		files, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			seeds = append(seeds, mutationSeed{path: f, data: data, yaml: strings.HasSuffix(f, ".yaml")})
		}
	}
	if len(seeds) < 20 {
		t.Fatalf("%d seed files; the ready inputs moved?", len(seeds))
	}
	return seeds
}

// validateMutant runs 'tracebed validate' on a mutant under the mutation
// limits and returns its exit code and stderr. A validate that takes
// longer than a minute is a hang.
func validateMutant(t *testing.T, path string) (int, string) {
	t.Helper()
	type result struct {
		code   int
		stderr string
	}
	done := make(chan result, 1)
	go func() {
		var o, e bytes.Buffer
		code := testApp(&o, &e).execute(context.Background(), []string{"validate", "--max-memory", "1GiB", "--max-events", "3e6", path})
		done <- result{code, e.String()}
	}()
	select {
	case r := <-done:
		return r.code, r.stderr
	case <-time.After(time.Minute):
		t.Fatalf("%s: validate still running after a minute", path)
	}
	return 0, ""
}

// runMutant runs one run of a mutant that validated, chosen at random: a
// spec as it is, a topology or a trace inside a small spec of its own. It
// reports whether it ran one (a netns spec, or a small spec that its
// mutant makes invalid, is skipped).
func runMutant(t *testing.T, r *rand.Rand, path string) bool {
	t.Helper()
	a := testApp(io.Discard, io.Discard)
	specPath := path
	switch ext := filepath.Ext(path); {
	case ext == ".yaml" && bytes.Contains(must(os.ReadFile(path)), []byte("\ntopology:")) && !bytes.Contains(must(os.ReadFile(path)), []byte("kind:")):
		specPath = writeIn(t, filepath.Dir(path), "topology-spec.yaml", "kind: ina\ntopology: "+filepath.Base(path)+"\nworkload: {jobs: 4, gpu_time: [1s, 4s]}\npolicies: [dynaina]\n")
	case ext == ".csv" || ext == ".jsonl" || ext == ".trace":
		specPath = writeIn(t, filepath.Dir(path), "jobs-spec.yaml", "kind: ina\ntopology: {generate: star, hosts: 16, aggregators: 1024}\ntrace: "+filepath.Base(path)+"\nworkload: {load: 1}\npolicies: [dynaina]\n")
	case ext == ".memtrace" || ext == ".memtxt" || ext == ".lackey":
		specPath = writeIn(t, filepath.Dir(path), "mem-spec.yaml", "kind: farmem\ntrace: "+filepath.Base(path)+"\nworkload: {hosts: 1, servers: 1}\npolicies: [glitter]\n")
	}
	data, err := os.ReadFile(specPath)
	if err != nil {
		t.Fatal(err)
	}
	s, err := experiments.ParseSpec(specPath, data, a.readEmbedded)
	if err != nil {
		return false
	}
	if s.Substrate != "sim" {
		return false
	}
	exp, err := a.registry.Compile(s)
	if err == nil {
		err = experiments.CheckLimits(s, exp, mutationLimits)
	}
	if err != nil {
		if specPath != path {
			return false // the small spec does not take this mutant
		}
		t.Errorf("%s validated but its spec does not compile: %v", path, err)
		return false
	}
	runs := experiments.Runs(s)
	run := runs[r.IntN(len(runs))]
	run.NewTestbed = experiments.SimTestbed
	ctx, cancel := context.WithTimeout(context.Background(), mutationRunBound)
	defer cancel()
	start := time.Now()
	res, err := exp.Run(ctx, run)
	switch {
	case ctx.Err() != nil:
		t.Errorf("%s: run %s/%s/seed %d still running after %v: it validated, so it must end", specPath, run.Scenario, run.Policy, run.Seed, mutationRunBound)
	case err != nil:
		t.Errorf("%s: run %s/%s/seed %d of a spec that validated failed: %v", specPath, run.Scenario, run.Policy, run.Seed, err)
	case res == nil:
		t.Errorf("%s: run %s/%s/seed %d returned no results", specPath, run.Scenario, run.Policy, run.Seed)
	default:
		t.Logf("%s: run %s/%s/seed %d done in %v", specPath, run.Scenario, run.Policy, run.Seed, time.Since(start).Round(time.Millisecond))
	}
	return true
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// writeIn writes a file of body into dir and returns its path.
func writeIn(t *testing.T, dir, name, body string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// mutate returns a mutant of seed and the name of the mutation: a change
// to one node of a YAML file (most of the time), or to its bytes.
func mutate(r *rand.Rand, seed mutationSeed) ([]byte, string) {
	if seed.yaml && r.IntN(4) != 0 {
		if out, op, ok := mutateYAML(r, seed.data); ok {
			return out, op
		}
	}
	return mutateBytes(r, seed.data)
}

// extremes are values a mutation puts where another was.
var extremes = []string{
	"0", "-1", "1", "0.5", "1e30", "-1e30", "1e-30", "1000000000000", "9223372036854775807",
	"18446744073709551616", "4294967296", "1e400", ".nan", ".inf", "-.inf", "0x10", "0b101",
	"100", "100Gbps", "1e30Gbps", "0bps", "-5us", "1e30s", "9999999h", "1e30B", "64KiB",
	"", "~", "nosuch", "true", "[]", "{}", "0.0.0.0", "224.0.0.1", "255.255.255.255", "127.0.0.1",
}

// mutateYAML changes one node of a YAML document: deletes a key or an
// item, swaps its type, sets an extreme or unknown value, strips a unit,
// renames a key or duplicates an entry.
func mutateYAML(r *rand.Rand, data []byte) ([]byte, string, bool) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil || len(doc.Content) == 0 {
		return nil, "", false
	}
	type site struct {
		parent *yaml.Node
		i      int // index in parent.Content
	}
	var sites []site
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		for i, c := range n.Content {
			if n.Kind == yaml.MappingNode && i%2 == 0 {
				continue // keys are reached through their values
			}
			sites = append(sites, site{n, i})
			walk(c)
		}
	}
	walk(doc.Content[0])
	if len(sites) == 0 {
		return nil, "", false
	}
	s := sites[r.IntN(len(sites))]
	n := s.parent.Content[s.i]
	inMap := s.parent.Kind == yaml.MappingNode
	var op string
	switch k := r.IntN(8); {
	case k == 0: // delete
		op = "delete"
		if inMap {
			s.parent.Content = slices.Delete(s.parent.Content, s.i-1, s.i+1)
		} else {
			s.parent.Content = slices.Delete(s.parent.Content, s.i, s.i+1)
		}
	case k == 1: // duplicate
		op = "duplicate"
		if inMap {
			s.parent.Content = slices.Insert(s.parent.Content, s.i+1, s.parent.Content[s.i-1], n)
		} else {
			s.parent.Content = slices.Insert(s.parent.Content, s.i+1, n)
		}
	case k == 2 && inMap: // unknown key
		op = "rename-key"
		s.parent.Content[s.i-1] = &yaml.Node{Kind: yaml.ScalarNode, Value: "nosuch_field"}
	case k == 3: // type swap
		op = "type-swap"
		switch n.Kind {
		case yaml.ScalarNode:
			if r.IntN(2) == 0 {
				s.parent.Content[s.i] = &yaml.Node{Kind: yaml.SequenceNode, Content: []*yaml.Node{n}}
			} else {
				s.parent.Content[s.i] = &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{{Kind: yaml.ScalarNode, Value: "x"}, n}}
			}
		default:
			s.parent.Content[s.i] = &yaml.Node{Kind: yaml.ScalarNode, Value: "7"}
		}
	case k == 4 && n.Kind == yaml.ScalarNode && unitRE.MatchString(n.Value): // strip the unit
		op = "strip-unit"
		n.Value = unitRE.FindStringSubmatch(n.Value)[1]
		n.Tag, n.Style = "", 0
	case k == 5 && n.Kind == yaml.ScalarNode: // scale a number
		op = "scale-number"
		n.Value = numberRE.ReplaceAllStringFunc(n.Value, func(v string) string {
			f, _ := strconv.ParseFloat(v, 64)
			return strconv.FormatFloat(f*[]float64{0, -1, 1e3, 1e9, 1e18, 1e-9}[r.IntN(6)], 'g', -1, 64)
		})
		n.Tag, n.Style = "", 0
	default: // an extreme or unknown value
		op = "extreme"
		v := extremes[r.IntN(len(extremes))]
		if r.IntN(20) == 0 {
			v = strings.Repeat("x", 1<<16)
		}
		s.parent.Content[s.i] = &yaml.Node{Kind: yaml.ScalarNode, Value: v}
	}
	out, err := yaml.Marshal(&doc)
	if err != nil {
		return nil, "", false
	}
	return out, op, true
}

var (
	unitRE   = regexp.MustCompile(`^([0-9.]+)\s*([A-Za-z/]+)$`)
	numberRE = regexp.MustCompile(`[0-9]+(\.[0-9]+)?`)
)

// mutateBytes changes a file's bytes: truncates it, inserts garbage,
// deletes, duplicates or swaps lines, flips a byte, or puts an extreme
// number in place of one.
func mutateBytes(r *rand.Rand, data []byte) ([]byte, string) {
	out := slices.Clone(data)
	if len(out) == 0 {
		return []byte{0}, "garbage"
	}
	at := r.IntN(len(out))
	lines := bytes.SplitAfter(out, []byte("\n"))
	switch r.IntN(7) {
	case 0:
		return out[:at], "truncate"
	case 1:
		garbage := [][]byte{{0}, {0xff, 0xfe}, []byte("\t: - [ {"), []byte("\x1b[31m"), []byte("&a *b"), []byte("\r\n"), []byte("\"unterminated"), bytes.Repeat([]byte("A"), 5000)}
		return slices.Concat(out[:at], garbage[r.IntN(len(garbage))], out[at:]), "garbage"
	case 2:
		out[at] ^= byte(1 << r.IntN(8))
		return out, "flip-bit"
	case 3:
		i := r.IntN(len(lines))
		return bytes.Join(slices.Delete(lines, i, i+1), nil), "delete-line"
	case 4:
		i := r.IntN(len(lines))
		return bytes.Join(slices.Insert(lines, i, lines[i]), nil), "duplicate-line"
	case 5:
		i, j := r.IntN(len(lines)), r.IntN(len(lines))
		lines[i], lines[j] = lines[j], lines[i]
		return bytes.Join(lines, nil), "swap-lines"
	}
	locs := numberRE.FindAllIndex(out, -1)
	if len(locs) == 0 {
		return out[:at], "truncate"
	}
	l := locs[r.IntN(len(locs))]
	v := []string{"0", "-1", "1e30", "99999999999999999999", "1e-30", "nan", "inf", "0x7fffffff", "0b101", "3600000000000"}[r.IntN(10)]
	return slices.Concat(out[:l[0]], []byte(v), out[l[1]:]), "extreme-number"
}

// FuzzValidate validates arbitrary bytes as a spec or topology (YAML)
// with every kind tracebed ships: never a panic, and a refusal always
// names a file and a line. The ready specs and topologies seed it.
func FuzzValidate(f *testing.F) {
	for _, pattern := range []string{"../../experiments/*.yaml", "../../topologies/*.yaml", "testdata/*.yaml"} {
		files, _ := filepath.Glob(pattern)
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	dir := f.TempDir()
	f.Setenv(memtrace.CacheDirEnv, filepath.Join(dir, "cache"))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "fuzz.yaml")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		var o, e bytes.Buffer
		code := testApp(&o, &e).execute(context.Background(), []string{"validate", "--max-events", "3e6", path})
		switch {
		case code == exitBadInput && !fileLine.MatchString(e.String()):
			t.Fatalf("refused without a file and line:\n%s", e.String())
		case code != exitOK && code != exitBadInput:
			t.Fatalf("validate exited %d:\n%s", code, e.String())
		}
	})
}
