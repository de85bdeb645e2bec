package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tracebed/tracebed/experiments"
	"github.com/tracebed/tracebed/internal/ctxio"
	"github.com/tracebed/tracebed/internal/problems"
	"github.com/tracebed/tracebed/internal/yamlx"
	"github.com/tracebed/tracebed/traces/jobs"
	memtrace "github.com/tracebed/tracebed/traces/mem"
)

// maxProblems is how many problems validate reports per file before it only
// counts the rest.
const maxProblems = problems.Max

func (a *app) validateCommand() *cobra.Command {
	limits := experiments.DefaultLimits
	var compression float64
	cmd := &cobra.Command{
		Use:   "validate FILE...",
		Short: "Check topology, experiment spec and trace files",
		Long: `Check each FILE and report every problem (up to 20 a file) with its file,
line and field. A YAML file with a "kind" key is an experiment spec
(checked against its kind, its topology and traces included), one with a
"topology" key is a topology; other files are checked as traces by their
extension: job traces (.csv, .jsonl, .ndjson, Gavel's .trace) and memory
traces (.memtrace, .memtxt, .lackey). Memory traces are read as a stream,
whatever their size. --time-compression checks a job trace as a spec's
time_compression replays it (Gavel's Philly trace needs 2 or more).

A spec is checked as 'tracebed run' checks it before running anything:
its runs' memory and simulation events are estimated and refused above
--max-memory and --max-events. What validate accepts runs.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var errs []error
			for _, path := range args {
				what, err := a.validate(cmd.Context(), path, limits, compression)
				if err != nil {
					// A file's sections are each checked to the limit;
					// the file as a whole is held to it too.
					l := problems.List{Limit: maxProblems}
					l.Add(err)
					errs = append(errs, l.Err())
					continue
				}
				fmt.Fprintf(a.stdout, "%s: ok (%s)\n", path, what)
			}
			if cmd.Context().Err() != nil {
				return context.Cause(cmd.Context()) // interrupted: exit 1, not bad input
			}
			if len(errs) > 0 {
				return badInput(errors.Join(errs...))
			}
			return nil
		},
	}
	addLimitFlags(cmd.Flags(), &limits)
	cmd.Flags().Float64Var(&compression, "time-compression", 1, "job traces: check them divided in time by this factor, as a spec's time_compression")
	return cmd
}

// validate checks one file, a spec against limits, a job trace at a time
// compression, and says what it was.
func (a *app) validate(ctx context.Context, path string, limits experiments.Limits, compression float64) (string, error) {
	ext := strings.ToLower(filepath.Ext(path))
	if v, ok := a.traceValidators(compression)[ext]; ok {
		return v(ctx, path)
	}
	switch ext {
	case ".yaml", ".yml":
	default:
		return "", fmt.Errorf("%s: unknown file type %q; tracebed validates .yaml topologies and specs and traces (%s)", path, filepath.Ext(path), strings.Join(a.traceExtensions(), ", "))
	}
	data, err := yamlx.ReadFile(path)
	if err != nil {
		return "", err
	}
	root, err := yamlx.Parse(path, data)
	if err != nil {
		return "", err
	}
	pairs, err := yamlx.Pairs(path, root, "")
	if err != nil {
		return "", err
	}
	for _, p := range pairs {
		switch p.Key {
		case "kind":
			// The shared sections' problems and the kind's, every one
			// (up to problems.Max) and each once: a spec with problems
			// in its shared sections is still compiled for the rest.
			s, err := experiments.ParseSpec(path, data, a.readEmbedded)
			if s == nil {
				return "", err
			}
			var probs problems.List
			probs.Add(err)
			s.SetContext(ctx)
			exp, cerr := a.registry.Compile(s)
			if cerr != nil && !yamlx.IsInputError(cerr) && probs.Len() == 0 {
				return "", cerr // not about the file (say, interrupted)
			}
			probs.Add(cerr)
			if b := s.AtBMv2Scale(); b != s && probs.Len() == 0 {
				// What validate accepts must run: on bmv2 too.
				if _, berr := a.registry.Compile(b); berr != nil {
					if !yamlx.IsInputError(berr) {
						return "", berr
					}
					var e *yamlx.Error
					if errors.As(berr, &e) {
						berr = s.Errorf("bmv2_scale", "%g: runs on bmv2 use it as their scale, and there %s: %s", s.BMv2Scale, e.Field, e.Msg)
					} else {
						berr = s.Errorf("bmv2_scale", "%g: runs on bmv2 use it as their scale: %v", s.BMv2Scale, berr)
					}
					probs.Add(berr)
				}
			}
			if err := probs.Err(); err != nil {
				return "", err
			}
			if err := experiments.CheckLimits(s, exp, limits); err != nil {
				return "", err
			}
			if err := rehearse(ctx, a.stderr, false, path, exp); err != nil {
				return "", err
			}
			runs := len(s.Policies) * len(s.Scenarios) * len(s.Seeds)
			return fmt.Sprintf("experiment %s of kind %s: %d policies × %d scenarios × %d seeds = %d runs%s", s.Name, s.Kind, len(s.Policies), len(s.Scenarios), len(s.Seeds), runs, needSummary(s, experiments.Needs(s, exp))), nil
		case "topology":
			top, err := a.loadTopology(path, data)
			if err != nil {
				return "", err
			}
			return "topology " + top.Summary(), nil
		}
	}
	return "", yamlx.Errorf(yamlx.NodePos(path, root), "", "neither an experiment spec (no kind field) nor a topology (no topology field)")
}

// traceValidators maps a file extension to the validator of that trace format.
// traceValidators returns the checks of trace files by extension, job
// traces at a time compression.
func (a *app) traceValidators(compression float64) map[string]func(ctx context.Context, path string) (string, error) {
	jobs := func(_ context.Context, path string) (string, error) { return validateJobTrace(path, compression) }
	return map[string]func(context.Context, string) (string, error){
		".csv": jobs, ".jsonl": jobs, ".ndjson": jobs, ".trace": jobs,
		".memtrace": validateMemTrace, ".memtxt": validateMemTrace, ".lackey": validateMemTrace,
	}
}

// validateMemTrace checks a memory-access trace (traces/mem: binary, text
// or valgrind lackey output) as a stream, reporting every bad line.
func validateMemTrace(ctx context.Context, path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	info, err := memtrace.Inspect(path, ctxio.Reader(ctx, f), memtrace.InspectOptions{MaxProblems: maxProblems})
	if err != nil {
		return "", err
	}
	if info.Stats.Accesses == 0 {
		// A far-memory run refuses it too (its figures would all be zero).
		const why = "no accesses: a host replaying it would do nothing; want at least one access"
		if info.Format == memtrace.Binary {
			end, _ := f.Seek(0, io.SeekCurrent)
			return "", fmt.Errorf("%s: end at byte %d: %s", path, end, why)
		}
		return "", fmt.Errorf("%s:1: %s", path, why)
	}
	what := fmt.Sprintf("memory trace, %s format", info.Format)
	if info.Format == memtrace.Binary {
		what = fmt.Sprintf("memory trace, binary format version %d", info.Version)
		if info.Version < memtrace.BinaryVersion {
			what += " (its header has no checksum: 'tracebed trace convert' rewrites it)"
		}
	}
	return fmt.Sprintf("%s, %d-byte pages: %v", what, info.Header.PageSize, info.Stats), nil
}

// validateJobTrace checks an INA job trace (traces/jobs: CSV, JSON Lines,
// the Tiresias CSV or Gavel's format) as a spec replays it at a time
// compression.
func validateJobTrace(path string, compression float64) (string, error) {
	data, err := readLimited(path, maxJobTrace)
	if err != nil {
		return "", err
	}
	jobs, format, err := jobtrace.ParseCompressed(path, data, compression)
	if err != nil {
		return "", err
	}
	what := fmt.Sprintf("job trace (%s): %d jobs", format, len(jobs))
	if compression != 1 {
		what += fmt.Sprintf(", compressed %g× in time", compression)
	}
	return what, nil
}

// maxJobTrace bounds the job traces read whole: a million jobs of about
// 100 bytes.
const maxJobTrace = 128 << 20

// readLimited reads a file of at most limit bytes.
func readLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: larger than %d MiB; a job trace holds at most a million jobs", path, limit>>20)
	}
	return data, nil
}

func (a *app) traceExtensions() []string {
	var exts []string
	for e := range a.traceValidators(1) {
		exts = append(exts, e)
	}
	slices.Sort(exts)
	return exts
}
