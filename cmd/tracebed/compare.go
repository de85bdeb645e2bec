package main

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tracebed/tracebed/analysis"
	"github.com/tracebed/tracebed/analysis/report"
)

// defaultTolerance is the relative move the wrong way compare allows
// without --tolerance.
const defaultTolerance = 0.05

// regressionError is returned by compare when a metric regressed: exit
// code 1, like a failed run, so CI fails.
type regressionError struct{ lines []string }

func (e regressionError) Error() string {
	return fmt.Sprintf("%d regression(s) beyond tolerance:\n  %s", len(e.lines), strings.Join(e.lines, "\n  "))
}

func (a *app) compareCommand() *cobra.Command {
	var (
		tolerances []string
		metrics    []string
		all        bool
		strict     bool
		format     *formatFlag
	)
	cmd := &cobra.Command{
		Use:   "compare [flags] BASELINE NEW",
		Short: "Compare two results or bench files and fail on a regression",
		Long: `Compare NEW against BASELINE — two results.json files (or results
directories) of the same experiment, or two bench.json files from
'tracebed bench' — and print the difference of every metric per scenario and
policy (per package and benchmark for bench files).

A metric regresses when it moves the wrong way (each metric declares whether
lower or higher is better; for benchmarks, times are lower-is-better and
rates higher-is-better) by more than the tolerance, relative to the
baseline. A metric that was 0 regresses on any move the wrong way.
Metrics without a direction are shown but never fail.

Exit codes: 0 no regression, 1 a regression (each is named on stderr),
2 bad input (a file of another schema or version, an unknown metric).`,
		Example: `  tracebed compare baseline/results.json results/farmem/results.json
  tracebed compare --tolerance 2% --metric throughput_ops --metric blocking_events base.json new.json
  tracebed compare --tolerance 5% --tolerance fault_p99_us=15% base.json new.json
  tracebed compare --tolerance 20% ci/bench-baseline.json bench.json`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts := report.CompareOptions{Tolerance: defaultTolerance, PerMetric: map[string]float64{}}
			for _, t := range tolerances {
				name, val, per := strings.Cut(t, "=")
				if !per {
					val = name
				}
				v, err := report.ParseTolerance(val)
				if err != nil {
					return badInput(fmt.Errorf("--tolerance: %w", err))
				}
				if per {
					opts.PerMetric[strings.TrimSpace(name)] = v
				} else {
					opts.Tolerance = v
				}
			}
			for _, m := range metrics {
				for _, name := range strings.Split(m, ",") {
					if name = strings.TrimSpace(name); name != "" {
						opts.Metrics = append(opts.Metrics, name)
					}
				}
			}
			base, err := report.ReadDataset(args[0])
			if err != nil {
				return badInput(err)
			}
			next, err := report.ReadDataset(args[1])
			if err != nil {
				return badInput(err)
			}
			c, err := report.Compare(base, next, opts)
			if errors.Is(err, report.ErrNothingInCommon) {
				return badInput(fmt.Errorf("%s and %s: %w (experiments %q and %q)", args[0], args[1], err, base.Name, next.Name))
			}
			if err != nil {
				return badInput(err)
			}
			n := c.Counts()
			switch {
			case format.value == formatJSON:
				err = writeJSON(a.stdout, comparisonJSON(c, args))
			case format.value == formatTable && n[report.Same] == len(c.Diffs) && !all:
				fmt.Fprintf(a.stdout, "%s: no differences: %d values compared, all the same.\n", c.Base.Name, len(c.Diffs))
				for _, note := range c.Notes {
					fmt.Fprintln(a.stdout, note)
				}
			default:
				err = writeTables(a.stdout, format.value, []analysis.Table{c.Table(all)})
			}
			if err != nil {
				return err
			}
			var lines []string
			for _, d := range c.Regressions() {
				lines = append(lines, d.Describe(c.Base.GroupName, c.Base.ItemName))
			}
			if strict {
				for _, d := range c.Diffs {
					if d.Status == report.Missing {
						lines = append(lines, fmt.Sprintf("%s of %s %s in %s %s is missing from %s (--strict)", d.Metric, c.Base.ItemName, d.Item, c.Base.GroupName, d.Group, args[1]))
					}
				}
			}
			if len(lines) > 0 {
				return regressionError{lines}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringArrayVarP(&tolerances, "tolerance", "t", nil, "allowed move the wrong way, relative to the baseline: 5% or 0.05 (default 5%); NAME=10% sets one metric's (repeatable)")
	f.StringArrayVarP(&metrics, "metric", "m", nil, "compare only these metrics (repeatable, or comma-separated)")
	f.BoolVar(&all, "all", false, "also list the values that did not change")
	f.BoolVar(&strict, "strict", false, "fail when a value of the baseline is missing from NEW")
	format = addFormatFlag(f, formatTable, "output format")
	return cmd
}

// comparisonJSON is the JSON form of a comparison (--format json).
func comparisonJSON(c *report.Comparison, files []string) any {
	type diff struct {
		Group     string   `json:"group"`
		Item      string   `json:"item"`
		Metric    string   `json:"metric"`
		Unit      string   `json:"unit,omitempty"`
		Better    string   `json:"better,omitempty"`
		Baseline  *float64 `json:"baseline"`
		New       *float64 `json:"new"`
		Change    *float64 `json:"change"` // relative; null when the baseline is 0 or a side is missing
		Tolerance float64  `json:"tolerance"`
		Status    string   `json:"status"`
	}
	out := struct {
		Baseline    string   `json:"baseline"`
		New         string   `json:"new"`
		Kind        string   `json:"kind"`
		GroupName   string   `json:"group_name"`
		ItemName    string   `json:"item_name"`
		Regressions int      `json:"regressions"`
		Notes       []string `json:"notes,omitempty"`
		Diffs       []diff   `json:"diffs"`
	}{Baseline: files[0], New: files[1], Kind: c.Base.Kind, GroupName: c.Base.GroupName, ItemName: c.Base.ItemName,
		Regressions: len(c.Regressions()), Notes: c.Notes, Diffs: []diff{}}
	for _, d := range c.Diffs {
		j := diff{Group: d.Group, Item: d.Item, Metric: d.Metric, Unit: d.Unit, Better: string(d.Better), Tolerance: d.Tolerance, Status: d.Status}
		if d.HasOld {
			v := d.Old.Mean
			j.Baseline = &v
		}
		if d.HasNew {
			v := d.New.Mean
			j.New = &v
		}
		if d.HasOld && d.HasNew && !math.IsInf(d.Change, 0) {
			v := d.Change
			j.Change = &v
		}
		out.Diffs = append(out.Diffs, j)
	}
	return out
}
