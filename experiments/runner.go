package experiments

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sync/semaphore"

	"github.com/tracebed/tracebed/analysis"
	"github.com/tracebed/tracebed/emulator/testbed"
)

// Kind is a kind of experiment (incast, ina, farmem, …): it knows how to read
// the kind-specific sections of a spec and run them.
type Kind interface {
	// Name is the value of the spec's kind field.
	Name() string
	// Compile checks the workload, policies, scenarios and substrate of
	// spec and returns what to run. Input errors are *yamlx.Error.
	Compile(spec *Spec) (Experiment, error)
}

// Experiment is a compiled spec.
type Experiment interface {
	// Metrics lists the metrics every run reports, in table order.
	Metrics() []analysis.MetricInfo
	// Run executes one (policy, scenario, seed). It is called concurrently
	// for different runs and must share no mutable state between them.
	Run(ctx context.Context, r Run) (*analysis.Run, error)
}

// SeriesDescriber is implemented by experiments whose runs record series
// (analysis.Run.Series) for plots.
type SeriesDescriber interface {
	SeriesInfo() []analysis.SeriesInfo
}

// Summarizer is implemented by experiments that add tables of their own to
// the per-scenario comparison, such as gains over a baseline.
type Summarizer interface {
	Summarize(res *analysis.Results) []analysis.Table
}

// Run identifies one run and carries its progress callback.
type Run struct {
	Policy    string
	Scenario  string
	Seed      int64
	Substrate string
	Scale     float64
	// Progress reports the fraction of the run done, in [0, 1]. It is
	// safe to call from the run's goroutine at any rate.
	Progress func(done float64)
	// NewTestbed builds the network of a run on the run's substrate (and,
	// on netns, with the chosen switch). Kinds that place agents on a
	// network use it instead of naming a substrate themselves.
	NewTestbed TestbedFactory
}

// TestbedFactory builds a testbed. It is set by the command line from
// --substrate and --switch.
type TestbedFactory func(ctx context.Context, cfg testbed.Config) (testbed.Testbed, error)

// SimTestbed is the factory of the sim substrate.
func SimTestbed(_ context.Context, cfg testbed.Config) (testbed.Testbed, error) {
	return testbed.NewSim(cfg)
}

// Registry maps kind names to kinds. The binary builds one with every kind
// it links; there is no global registry.
type Registry struct {
	kinds map[string]Kind
}

// NewRegistry returns a registry of kinds.
func NewRegistry(kinds ...Kind) *Registry {
	r := &Registry{kinds: map[string]Kind{}}
	for _, k := range kinds {
		r.kinds[k.Name()] = k
	}
	return r
}

// Names lists the registered kinds, sorted.
func (r *Registry) Names() []string {
	var names []string
	for n := range r.kinds {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Compile checks spec against its kind.
func (r *Registry) Compile(spec *Spec) (Experiment, error) {
	k := r.kinds[spec.Kind]
	if k == nil {
		return nil, spec.Errorf("kind", "%q is not a kind of experiment; want one of %s", spec.Kind, strings.Join(r.Names(), ", "))
	}
	return k.Compile(spec)
}

// Progress receives the progress of a whole execution.
type Progress interface {
	// Update reports done runs (fractional) out of total; it is called
	// from several goroutines.
	Update(done, total float64)
}

// Options tune an execution.
type Options struct {
	Parallel int    // concurrent runs; 0 means GOMAXPROCS
	Version  string // recorded in results.json
	Commit   string
	Progress Progress // nil: none
	// NewTestbed builds testbeds for runs; nil means SimTestbed.
	NewTestbed TestbedFactory
	// Shard, if its Count is not 0, runs only that shard of the runs
	// (NewPlan); the results then hold those runs alone.
	Shard Shard
	// Capture, if set, is called with every testbed a run builds, as soon
	// as it is built: it may start packet captures (testbed.Capturer) and
	// returns what stops them, called when the run is over.
	Capture func(r Run, tb testbed.Testbed) (stop func() error, err error)
	// Memory, if positive, bounds the estimated memory (Need) of the runs
	// under way together: a run starts when its estimate fits beside
	// those of the runs under way, or when none is. CheckLimits refuses
	// a run whose estimate alone exceeds it.
	Memory int64
}

// RunError is a failure of one run (as opposed to bad input).
type RunError struct {
	Run Run
	Err error
}

func (e *RunError) Error() string {
	return fmt.Sprintf("run %s/%s/seed %d: %v", e.Run.Scenario, e.Run.Policy, e.Run.Seed, e.Err)
}

func (e *RunError) Unwrap() error { return e.Err }

// PanicError is a run that panicked: a bug in tracebed, whatever the
// input, since every input problem is an error. It names the run.
type PanicError struct {
	Value any    // what was passed to panic
	Stack []byte // the goroutine's stack at the panic
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v\n%s", e.Value, e.Stack) }

// Execute runs every (scenario, policy, seed) of spec, or those of
// opts.Shard, in parallel, and returns the results in canonical order.
//
// If ctx is done before every run finished (a signal, a deadline), the runs
// under way stop within a moment, and Execute returns the results of the
// runs that finished, marked partial (analysis.Results.Partial), together
// with an error that wraps ctx's cause. A run that panicked is a
// *PanicError.
func Execute(ctx context.Context, spec *Spec, exp Experiment, opts Options) (*analysis.Results, error) {
	res := &analysis.Results{
		Schema: analysis.Schema, Experiment: spec.Name, Kind: spec.Kind,
		Substrate: spec.Substrate, Seed: spec.Seeds[0], Seeds: spec.Seeds, Scale: spec.Scale,
		Version: opts.Version, Commit: opts.Commit, Spec: filepath.ToSlash(spec.File), SpecHash: spec.Hash,
		Metrics: exp.Metrics(),
	}
	if sd, ok := exp.(SeriesDescriber); ok {
		res.SeriesInfo = sd.SeriesInfo()
	}
	for _, p := range spec.Policies {
		res.Policies = append(res.Policies, p.Name)
	}
	for _, s := range spec.Scenarios {
		res.Scenarios = append(res.Scenarios, s.Name)
	}
	newTestbed := opts.NewTestbed
	if newTestbed == nil {
		newTestbed = SimTestbed
	}
	runs := Runs(spec)
	if opts.Shard.Count > 0 {
		runs = NewPlan(spec, exp, opts.Shard.Count).Of(opts.Shard.Index)
	}
	for i := range runs {
		runs[i].NewTestbed = newTestbed
	}
	parallel := opts.Parallel
	if parallel <= 0 {
		parallel = runtime.GOMAXPROCS(0)
	}
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var (
		mu       sync.Mutex
		fraction = make([]float64, len(runs))
		out      = make([]*analysis.Run, len(runs))
		errs     []error
	)
	report := func(i int, f float64) {
		if opts.Progress == nil {
			return
		}
		mu.Lock()
		fraction[i] = min(max(f, fraction[i]), 1)
		var sum float64
		for _, v := range fraction {
			sum += v
		}
		mu.Unlock()
		opts.Progress.Update(sum, float64(len(runs)))
	}
	// The memory each run is estimated to need, as a share of the budget.
	var budget *semaphore.Weighted
	weight := make([]int64, len(runs))
	if needs := Needs(spec, exp); needs != nil && opts.Memory > 0 {
		budget = semaphore.NewWeighted(opts.Memory)
		for i, r := range runs {
			for k, sc := range spec.Scenarios {
				if sc.Name == r.Scenario {
					weight[i] = min(max(needs[k].Memory, 1), opts.Memory)
				}
			}
		}
	}
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range min(parallel, len(runs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				r := runs[i]
				r.Progress = func(f float64) { report(i, f) }
				if budget != nil && weight[i] > 0 {
					if err := budget.Acquire(ctx, weight[i]); err != nil {
						continue // interrupted before it started
					}
				}
				var stops []func() error
				if opts.Capture != nil {
					r.NewTestbed = capturing(r, opts.Capture, &stops)
				}
				run, err := runOne(ctx, exp, r)
				for _, stop := range stops {
					if serr := stop(); serr != nil && err == nil {
						err = fmt.Errorf("capture: %w", serr)
					}
				}
				if budget != nil && weight[i] > 0 {
					budget.Release(weight[i])
				}
				report(i, 1)
				mu.Lock()
				if err != nil {
					errs = append(errs, &RunError{Run: r, Err: err})
					cancel()
				} else {
					out[i] = run
				}
				mu.Unlock()
			}
		}()
	}
	for i := range runs {
		if ctx.Err() != nil {
			break
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	interrupted := parent.Err() != nil
	if interrupted {
		// Runs that stopped because ctx was done did not fail; a panic
		// is still a bug.
		errs = slices.DeleteFunc(errs, func(err error) bool {
			var pe *PanicError
			return !errors.As(err, &pe)
		})
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	for i, run := range out {
		if run == nil {
			continue // not done: the execution was interrupted
		}
		run.Policy, run.Scenario, run.Seed = runs[i].Policy, runs[i].Scenario, runs[i].Seed
		res.Runs = append(res.Runs, *run)
	}
	if interrupted {
		cause := context.Cause(parent)
		res.Partial = &analysis.Partial{Reason: cause.Error(), Done: len(res.Runs), Of: len(runs)}
	}
	res.Sort()
	if err := res.Validate(); err != nil {
		return nil, fmt.Errorf("experiment %s produced invalid results: %w", spec.Name, err)
	}
	if p := res.Partial; p != nil {
		return res, fmt.Errorf("%s stopped after %d of %d runs: %w", spec.Name, p.Done, p.Of, context.Cause(parent))
	}
	return res, nil
}

// capturing wraps r's testbed factory so that capture starts on every
// testbed it builds; the stops pile up in stops.
func capturing(r Run, capture func(Run, testbed.Testbed) (func() error, error), stops *[]func() error) TestbedFactory {
	var mu sync.Mutex
	build := r.NewTestbed
	return func(ctx context.Context, cfg testbed.Config) (testbed.Testbed, error) {
		tb, err := build(ctx, cfg)
		if err != nil {
			return nil, err
		}
		stop, err := capture(r, tb)
		if err != nil {
			tb.Close()
			return nil, fmt.Errorf("capture: %w", err)
		}
		mu.Lock()
		*stops = append(*stops, stop)
		mu.Unlock()
		return tb, nil
	}
}

// runOne runs r, turning a panic into an error that names the run.
func runOne(ctx context.Context, exp Experiment, r Run) (run *analysis.Run, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &PanicError{Value: p, Stack: debug.Stack()}
		}
	}()
	run, err = exp.Run(ctx, r)
	if err == nil && run == nil {
		err = errors.New("run returned no results")
	}
	return run, err
}

// Tables returns the comparison tables of res plus the experiment's own.
func Tables(exp Experiment, res *analysis.Results) []analysis.Table {
	tables := res.Comparison()
	if s, ok := exp.(Summarizer); ok {
		tables = append(tables, s.Summarize(res)...)
	}
	return tables
}

// Write stores res under dir/<experiment>/: results.json, results.csv and
// results.md (the tables in Markdown). It returns the directory.
func Write(dir string, res *analysis.Results, tables []analysis.Table) (string, error) {
	out := filepath.Join(dir, res.Experiment)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", err
	}
	js, err := res.Marshal()
	if err != nil {
		return "", err
	}
	csv, err := res.CSV()
	if err != nil {
		return "", err
	}
	var md strings.Builder
	fmt.Fprintf(&md, "# %s\n\nSpec `%s` (sha256 %.12s…), substrate %s, seeds %v, tracebed %s.\n\n", res.Experiment, res.Spec, res.SpecHash, res.Substrate, res.Seeds, res.Version)
	if p := res.Partial; p != nil {
		fmt.Fprintf(&md, "**Partial results**: %s after %d of %d runs; the tables hold the runs that finished.\n\n", p.Reason, p.Done, p.Of)
	}
	for _, t := range tables {
		if err := t.WriteMarkdown(&md); err != nil {
			return "", err
		}
	}
	for name, data := range map[string][]byte{"results.json": js, "results.csv": csv, "results.md": []byte(md.String())} {
		if err := os.WriteFile(filepath.Join(out, name), data, 0o644); err != nil {
			return "", err
		}
	}
	return out, nil
}
