package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tracebed/tracebed/analysis"
	"github.com/tracebed/tracebed/analysis/report"
	"github.com/tracebed/tracebed/experiments"
)

// modulePath is tracebed's Go module.
const modulePath = "github.com/tracebed/tracebed"

// headline is a figure of merit tracebed bench reports: the benchmark of
// package that provides it — the one named, or else the first that reports
// a rate (events/s, pkts/s, …) — and its unit (the one named, or else the
// first rate it reports). Packages that others are still writing may not
// exist yet; bench then says so instead of failing.
type headline struct {
	what, pkg, bench, unit string
}

var headlines = []headline{
	{"simulation event rate (frames through 8 forwarding switches)", "emulator/sim", "BenchmarkLinkHop", "events/s"},
	{"simulation event core (event heap alone)", "emulator/sim", "BenchmarkEventCore", "events/s"},
	{"incast: one million frames simulated (events per CPU-second; issue 19: ≥ 5 M)", "workloads/incast", "BenchmarkIncastMillion", "events/cpu-s"},
	{"incast: sim vs ns-3's device-level program, same run (issue 19: ≥ 3×; needs ns-3)", "workloads/incast", "BenchmarkNS3Incast", "speedup_vs_ns3"},
	{"forwarding pipeline packet rate", "p4/fwd", "", ""},
	{"INA pipeline packet rate", "p4/ina", "BenchmarkPipeline", ""},
	{"far-memory pipeline packet rate", "p4/farmem", "", ""},
	{"Go switch packet rate, 256-byte frames (netns, needs root)", "emulator/switch", "BenchmarkSwitchVsBridge/frame=256", "switch_pps"},
	{"Go switch vs Linux bridge, 64-byte frames, same run (netns, needs root; issue 19: ≥ 1.0)", "emulator/switch", "BenchmarkSwitchVsBridge/frame=64", "switch_vs_bridge"},
	{"Go switch vs Linux bridge, 256-byte frames, same run (netns, needs root; issue 19: ≥ 1.0)", "emulator/switch", "BenchmarkSwitchVsBridge/frame=256", "switch_vs_bridge"},
	{"Go switch vs Linux bridge, 1500-byte frames, same run (netns, needs root; issue 19: ≥ 1.0)", "emulator/switch", "BenchmarkSwitchVsBridge/frame=1500", "switch_vs_bridge"},
	{"Go switch: CPU per forwarded packet, sender's and switch's threads, 256-byte frames (netns, needs root; the bridge's is bridge_ns/pkt)", "emulator/switch", "BenchmarkSwitchVsBridge/frame=256", "total_ns/pkt"},
	{"INA packets through the Go switch's ina pipeline vs Linux bridge, same run (netns, needs root; issue 19: ≥ 1.0)", "p4/ina", "BenchmarkINASwitchVsBridge", "switch_vs_bridge"},
	{"INA flow-level simulation", "workloads/training", "BenchmarkFlowRun", ""},
	{"INA workers: 8-worker 100 MB all-reduce (CPU seconds)", "workloads/allreduce", "BenchmarkAllReduce100MB", "cpu-s/op"},
	{"far-memory replay at 5% faults (accesses per CPU-second; issue 19: ≥ 5 M)", "workloads/farmem/paging", "BenchmarkReplay/memcached-faults5%", "accesses/cpu-s"},
	{"RoCEv2 RC flow, 4 KiB MTU (packets per CPU-second; issue 11: ≥ 1 M)", "emulator/roce", "BenchmarkRCFlow", "pkts/cpu-s"},
	{"lackey import (data accesses per CPU-second)", "traces/mem", "BenchmarkLackeyImport", "M_accesses/cpu-s"},
	{"1 GB lackey recording: peak memory of convert + replay", "workloads/farmem", "BenchmarkReplayLackey1GB", "peak_MB_convert+replay"},
}

func (a *app) benchCommand() *cobra.Command {
	var (
		out       string
		benchtime string
		count     int
		pattern   string
		packages  []string
		suite     bool
		specs     []string
		goCmd     string
		quiet     bool
		format    *formatFlag
	)
	cmd := &cobra.Command{
		Use:   "bench [flags]",
		Short: "Run the performance benchmarks and write bench.json",
		Long: `Run tracebed's performance benchmarks and write bench.json:

  - every Go benchmark in the module (found by reading the _test.go files of
    the packages 'go list' reports, then run with 'go test -bench'), which
    includes the simulation event rate, the pipelines' packet rates and,
    when run as root, the Go switch's packet rate;
  - the wall-clock time of every experiment of the default suite (or of
    --spec), run in process on the simulation substrate.

A headline table lists the figures of merit; one whose package or benchmark
does not exist yet, or that skipped (no root), says so instead of failing.
Go benchmarks need tracebed's source tree and the go command; run bench from
a checkout. Compare two bench.json files with 'tracebed compare'.

Exit codes: 0 done, 1 a benchmark failed or a package's tests do not build
(bench.json is written anyway), 2 bad input.`,
		Example: "  tracebed bench\n  tracebed bench --benchtime 3x --suite=false --out /tmp/bench.json\n  tracebed bench --packages ./emulator/sim --bench LinkHop",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if count < 1 {
				return badInput(fmt.Errorf("--count %d: want 1 or more", count))
			}
			if _, err := regexp.Compile(pattern); err != nil {
				return badInput(fmt.Errorf("--bench %q: %v", pattern, err))
			}
			progress := a.stderr
			if quiet {
				progress = io.Discard
			}
			b := &report.Bench{
				Version: version, Commit: buildCommit(), Date: time.Now().UTC().Format(time.RFC3339),
				Benchtime: benchtime, Machine: analysis.CurrentMachine(),
			}
			var failed []string
			gob := goBench{goCmd: goCmd, benchtime: benchtime, count: count, pattern: pattern, packages: packages, log: progress}
			found, err := gob.run(cmd.Context(), b)
			if err != nil {
				b.Notes = append(b.Notes, report.BenchNote{Package: "(all)", Status: report.StatusSkipped, Message: err.Error()})
				fmt.Fprintf(progress, "bench: Go benchmarks not run: %v\n", err)
			}
			for _, n := range b.Notes {
				if n.Status == report.StatusFailed {
					failed = append(failed, strings.TrimSpace(n.Package+" "+n.Benchmark)+": "+n.Message)
				}
			}
			b.Headline = headlineOf(b, found, err == nil)
			if suite {
				if err := a.benchSuites(cmd.Context(), b, specs, progress); err != nil {
					return err
				}
			}
			data, err := b.Marshal()
			if err != nil {
				return err
			}
			if err := os.WriteFile(out, data, 0o644); err != nil {
				return err
			}
			if format.value == formatJSON {
				if _, err := a.stdout.Write(data); err != nil {
					return err
				}
			} else if err := writeTables(a.stdout, format.value, b.Tables()); err != nil {
				return err
			}
			fmt.Fprintf(progress, "bench: %d benchmarks, %d suites in %s\n", len(b.Benchmarks), len(b.Suites), out)
			if len(failed) > 0 {
				return fmt.Errorf("%d benchmark package(s) failed:\n  %s", len(failed), strings.Join(failed, "\n  "))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&out, "out", "o", "bench.json", "where to write the results")
	f.StringVar(&benchtime, "benchtime", "1s", "go test -benchtime: run time (1s) or iterations (100x) per benchmark")
	f.IntVar(&count, "count", 1, "go test -count: runs of each benchmark, averaged")
	f.StringVar(&pattern, "bench", ".", "go test -bench: benchmarks to run (a regular expression)")
	f.StringArrayVar(&packages, "packages", nil, "package patterns to benchmark (default: the whole module)")
	f.BoolVar(&suite, "suite", true, "also time the experiments of the default suite (or --spec)")
	f.StringArrayVar(&specs, "spec", nil, "experiments to time instead of the default suite (repeatable)")
	f.StringVar(&goCmd, "go", "go", "the go command")
	f.BoolVarP(&quiet, "quiet", "q", false, "no progress on stderr")
	format = addFormatFlag(f, formatTable, "what to print on stdout")
	return cmd
}

// goBench finds and runs the module's Go benchmarks.
type goBench struct {
	goCmd, benchtime, pattern string
	count                     int
	packages                  []string
	log                       io.Writer
}

// benchPackage is a package of the module with benchmark functions.
type benchPackage struct {
	rel        string // relative to the module: "emulator/sim"
	benchmarks []string
}

// run discovers the packages with benchmarks, runs them and fills
// b.Benchmarks and b.Notes. It returns every package of the module (with
// or without benchmarks) by relative path.
func (g goBench) run(ctx context.Context, b *report.Bench) (map[string]benchPackage, error) {
	mod, err := g.output(ctx, "env", "GOMOD")
	if err != nil {
		return nil, err
	}
	mod = strings.TrimSpace(mod)
	if mod == "" || mod == os.DevNull {
		return nil, errors.New("not inside a Go module; run tracebed bench from tracebed's source tree")
	}
	root := filepath.Dir(mod)
	pats := g.packages
	if len(pats) == 0 {
		pats = []string{modulePath + "/..."}
	}
	listed, err := g.output(ctx, append([]string{"list", "-e", "-json=ImportPath,Dir,TestGoFiles,XTestGoFiles,Module"}, pats...)...)
	if err != nil {
		return nil, err
	}
	all := map[string]benchPackage{}
	var run []string
	dec := json.NewDecoder(strings.NewReader(listed))
	for dec.More() {
		var p struct {
			ImportPath, Dir           string
			TestGoFiles, XTestGoFiles []string
			Module                    *struct{ Path string }
		}
		if err := dec.Decode(&p); err != nil {
			return nil, fmt.Errorf("go list: %v", err)
		}
		if p.Module == nil || p.Module.Path != modulePath {
			return nil, fmt.Errorf("%s is not in module %s (go.mod at %s); run tracebed bench from tracebed's source tree", p.ImportPath, modulePath, root)
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, modulePath), "/")
		if rel == "" {
			rel = "."
		}
		bp := benchPackage{rel: rel}
		for _, f := range append(p.TestGoFiles, p.XTestGoFiles...) {
			bp.benchmarks = append(bp.benchmarks, benchmarkFuncs(filepath.Join(p.Dir, f))...)
		}
		slices.Sort(bp.benchmarks)
		all[rel] = bp
		if len(bp.benchmarks) > 0 {
			run = append(run, p.ImportPath)
		}
	}
	if len(run) == 0 {
		return all, nil
	}
	fmt.Fprintf(g.log, "bench: go test -bench %s over %d packages: %s\n", g.pattern, len(run), strings.Join(relAll(run), " "))
	args := []string{"test", "-run", "^$", "-bench", g.pattern, "-benchmem", "-benchtime", g.benchtime, "-count", fmt.Sprint(g.count)}
	var outBuf bytes.Buffer
	c := exec.CommandContext(ctx, g.goCmd, append(args, run...)...)
	c.Stdout = io.MultiWriter(&outBuf, g.log)
	c.Stderr = io.MultiWriter(&outBuf, g.log)
	runErr := c.Run()
	bms, notes, err := report.ParseGoBench(&outBuf, modulePath)
	if err != nil {
		return all, fmt.Errorf("reading go test output: %v", err)
	}
	b.Benchmarks, b.Notes = bms, notes
	if runErr != nil && !slices.ContainsFunc(notes, func(n report.BenchNote) bool { return n.Status == report.StatusFailed }) {
		if ctx.Err() != nil {
			return all, ctx.Err()
		}
		b.Notes = append(b.Notes, report.BenchNote{Package: "(go test)", Status: report.StatusFailed, Message: runErr.Error()})
	}
	return all, nil
}

func (g goBench) output(ctx context.Context, args ...string) (string, error) {
	c := exec.CommandContext(ctx, g.goCmd, args...)
	var stderr bytes.Buffer
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %v: %s", g.goCmd, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

func relAll(pkgs []string) []string {
	out := make([]string, len(pkgs))
	for i, p := range pkgs {
		out[i] = strings.TrimPrefix(strings.TrimPrefix(p, modulePath), "/")
	}
	return out
}

// benchmarkFuncs returns the names of the benchmark functions of a test
// file: top-level func BenchmarkXxx(b *testing.B).
func benchmarkFuncs(path string) []string {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil // go test will report it
	}
	var names []string
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Benchmark") || fn.Type.Params == nil || len(fn.Type.Params.List) != 1 {
			continue
		}
		if rest := strings.TrimPrefix(fn.Name.Name, "Benchmark"); rest != "" && strings.ToUpper(rest[:1]) != rest[:1] {
			continue
		}
		names = append(names, fn.Name.Name)
	}
	return names
}

// headlineOf fills the declared figures of merit from the benchmarks run,
// saying why one is missing.
func headlineOf(b *report.Bench, pkgs map[string]benchPackage, ran bool) []report.Headline {
	var out []report.Headline
	for _, h := range headlines {
		hl := report.Headline{What: h.what, Package: h.pkg, Benchmark: h.bench}
		pkg, exists := pkgs[h.pkg]
		switch {
		case !ran:
			hl.Status, hl.Note = report.StatusMissing, "Go benchmarks were not run"
			out = append(out, hl)
			continue
		case !exists:
			hl.Status, hl.Note = report.StatusMissing, "package "+h.pkg+" does not exist yet (or was not selected by --packages)"
			out = append(out, hl)
			continue
		case len(pkg.benchmarks) == 0:
			hl.Status, hl.Note = report.StatusMissing, "package "+h.pkg+" has no benchmarks yet"
			out = append(out, hl)
			continue
		case h.bench != "" && !slices.Contains(pkg.benchmarks, topBenchmark(h.bench)):
			hl.Status, hl.Note = report.StatusMissing, fmt.Sprintf("package %s has no %s (it has %s)", h.pkg, topBenchmark(h.bench), strings.Join(pkg.benchmarks, ", "))
			out = append(out, hl)
			continue
		}
		if bm, unit, ok := pickBenchmark(b.Benchmarks, h); ok {
			hl.Benchmark, hl.Unit, hl.Value, hl.Status = bm.Name, unit, bm.Metrics[unit], report.StatusOK
			out = append(out, hl)
			continue
		}
		hl.Status, hl.Note = report.StatusMissing, "no result (not selected by --bench?)"
		for _, n := range b.Notes {
			if n.Package == h.pkg && (h.bench == "" || n.Benchmark == h.bench || n.Benchmark == topBenchmark(h.bench) || n.Benchmark == "") {
				hl.Status, hl.Note = n.Status, n.Message
				if n.Benchmark != "" {
					hl.Benchmark = n.Benchmark
				}
				break
			}
		}
		out = append(out, hl)
	}
	return out
}

// topBenchmark returns the benchmark function of a benchmark's name, which
// may name a sub-benchmark (BenchmarkReplay/memcached-faults5%).
func topBenchmark(name string) string {
	top, _, _ := strings.Cut(name, "/")
	return top
}

// pickBenchmark returns the benchmark and unit that stand for h: the named
// benchmark or sub-benchmark (or the first sub-benchmark of one), else the package's first
// benchmark reporting a rate, else its first benchmark's ns/op.
func pickBenchmark(bms []report.Benchmark, h headline) (report.Benchmark, string, bool) {
	var cands []report.Benchmark
	for _, bm := range bms {
		if bm.Package != h.pkg {
			continue
		}
		if h.bench == "" || bm.Name == h.bench || strings.HasPrefix(bm.Name, h.bench+"/") {
			cands = append(cands, bm)
		}
	}
	if h.unit != "" {
		for _, bm := range cands {
			if _, ok := bm.Metrics[h.unit]; ok {
				return bm, h.unit, true
			}
		}
	}
	for _, bm := range cands {
		for _, u := range sortedUnits(bm.Metrics) {
			if report.UnitBetter(u) == analysis.Higher {
				return bm, u, true
			}
		}
	}
	for _, bm := range cands {
		if _, ok := bm.Metrics["ns/op"]; ok {
			return bm, "ns/op", true
		}
	}
	return report.Benchmark{}, "", false
}

func sortedUnits(m map[string]float64) []string {
	var us []string
	for u := range m {
		us = append(us, u)
	}
	slices.Sort(us)
	return us
}

// benchSuites times every experiment of the default suite (or specs) on
// the simulation substrate, in process, writing nothing.
func (a *app) benchSuites(ctx context.Context, b *report.Bench, specs []string, log io.Writer) error {
	list, err := a.loadSpecs(specs)
	if err != nil {
		return err
	}
	for _, s := range list {
		s.Substrate = "sim"
		exp, err := a.registry.Compile(s)
		if err != nil {
			return badInput(err)
		}
		start := time.Now()
		res, err := experiments.Execute(ctx, s, exp, experiments.Options{Parallel: runtime.GOMAXPROCS(0), Version: version})
		if err != nil {
			b.Notes = append(b.Notes, report.BenchNote{Package: "suite", Benchmark: s.Name, Status: report.StatusFailed, Message: err.Error()})
			continue
		}
		wall := time.Since(start).Seconds()
		st := report.SuiteTime{Experiment: s.Name, Runs: len(res.Runs), WallS: wall, RunsPerS: float64(len(res.Runs)) / wall}
		b.Suites = append(b.Suites, st)
		b.Headline = append(b.Headline, report.Headline{What: "suite: " + s.Name, Package: "suite", Benchmark: s.Name, Unit: "wall_s", Value: wall, Status: report.StatusOK,
			Note: fmt.Sprintf("%d runs, %d at once", len(res.Runs), runtime.GOMAXPROCS(0))})
		fmt.Fprintf(log, "bench: suite %s: %d runs in %.2fs\n", s.Name, len(res.Runs), wall)
	}
	return nil
}
