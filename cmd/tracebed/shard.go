package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tracebed/tracebed/analysis"
	"github.com/tracebed/tracebed/experiments"
)

// defaultShardOut is where run --shard writes when --out is not given.
const defaultShardOut = "results/shards"

// writeShard stores the results of one shard of spec as
// out/<experiment>/shard-I-of-N.json and says what it ran.
func (a *app) writeShard(out string, spec *experiments.Spec, exp experiments.Experiment, shard experiments.Shard, res *analysis.Results, info runInfo, quiet bool) error {
	plan := experiments.NewPlan(spec, exp, shard.Count)
	prov := a.provenance(res, info)
	prov.Shard = shard.String()
	path, err := analysis.WriteShard(out, &analysis.ShardFile{
		Index: shard.Index, Count: shard.Count,
		Cost: plan.Load[shard.Index], TotalCost: plan.Total(),
		Provenance: &prov, Results: *res,
	})
	if err != nil {
		return err
	}
	names := make([]string, len(res.Runs))
	for i, r := range res.Runs {
		names[i] = fmt.Sprintf("%s/%s/seed %d", r.Scenario, r.Policy, r.Seed)
	}
	ran := "no runs (more shards than runs)"
	if len(names) > 0 {
		ran = strings.Join(names, ", ")
	}
	fmt.Fprintf(a.stdout, "%s shard %s: %d of %d runs, %.0f%% of the estimated cost: %s\n",
		spec.Name, shard, len(res.Runs), len(plan.Runs), 100*plan.Load[shard.Index]/plan.Total(), ran)
	if !quiet {
		fmt.Fprintf(a.stderr, "%s shard %s: %d runs in %.1fs; wrote %s\n", spec.Name, shard, len(res.Runs), info.wall.Seconds(), path)
	}
	return nil
}

func (a *app) mergeCommand() *cobra.Command {
	var (
		out    string
		wait   time.Duration
		expect []string
		plots  bool
		report bool
		quiet  bool
		format *formatFlag
	)
	cmd := &cobra.Command{
		Use:   "merge [flags] DIR...",
		Short: "Join the shards of sharded runs into their results",
		Long: `Join the shard files (shard-I-of-N.json, written by 'tracebed run --shard
I/N') found in each DIR, at any depth, into OUT/<experiment>/ for each
experiment: results.json byte-identical to an unsharded run's, results.csv,
results.md, the figures and provenance.json (which lists every shard's
command, machine and wall time), then OUT/REPORT.md of every experiment in
OUT, and print the comparison tables.

Shards of one experiment must come from one sweep: the same spec (path and
SHA-256), tracebed version and commit, seeds, substrate and number of
shards. Merge refuses them otherwise and names the field and the files; a
shard missing or found twice is an error naming it.

With --wait, merge waits up to that long for the shards to appear (a
cluster's merge job may start before the shards end), checking every
second; --expect names experiments that must be among them.`,
		Example: "  tracebed merge results/shards\n  tracebed merge --out results node1/shards node2/shards\n  tracebed merge --wait 24h --expect dynaina-sweep --out /results /results/shards",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			groups, err := a.awaitShards(cmd.Context(), args, expect, wait, quiet)
			if err != nil {
				return err
			}
			for _, name := range slices.Sorted(maps.Keys(groups)) {
				shards := groups[name]
				res, err := analysis.MergeShards(shards)
				if err != nil {
					return badInput(err)
				}
				tables, notes := a.tablesFor(res, nil)
				for _, n := range notes {
					fmt.Fprintf(a.stderr, "%s: %s\n", name, n)
				}
				dir, err := experiments.Write(out, res, tables)
				if err != nil {
					return err
				}
				slices.SortFunc(shards, func(x, y *analysis.ShardFile) int { return x.Index - y.Index })
				if err := writeArtifacts(dir, res, analysis.MergeProvenance(a.commandLine(), res, shards), plots); err != nil {
					return err
				}
				if err := printResults(a.stdout, format.value, res, tables); err != nil {
					return err
				}
				if !quiet {
					fmt.Fprintf(a.stderr, "%s: merged %d shards, %d runs; results in %s\n", name, len(shards), len(res.Runs), dir)
				}
			}
			if !report {
				return nil
			}
			rep, err := a.buildReport([]string{out}, "tracebed results", plots)
			if err != nil {
				return err
			}
			var b strings.Builder
			if err := rep.WriteMarkdown(&b, out); err != nil {
				return err
			}
			path := filepath.Join(out, "REPORT.md")
			if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
				return err
			}
			if !quiet {
				fmt.Fprintf(a.stderr, "report of %d experiment(s) in %s\n", len(rep.Entries), path)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&out, "out", "results", "directory for the merged results")
	f.DurationVar(&wait, "wait", 0, "wait up to this long for missing shards to appear (e.g. 24h); 0: merge what is there now")
	f.StringSliceVar(&expect, "expect", nil, "experiments whose shards must be there (with --wait: wait for them too)")
	f.BoolVar(&plots, "plots", true, "write the figures (PNG, SVG) next to the results")
	f.BoolVar(&report, "report", true, "write OUT/REPORT.md of every experiment in OUT")
	f.BoolVarP(&quiet, "quiet", "q", false, "no summary lines on stderr")
	format = addFormatFlag(f, formatTable, "what to print on stdout: the comparison tables, or the runs as CSV, or results.json")
	return cmd
}

// awaitShards reads the shard files under args, grouped by experiment.
// With a wait, it reads them again every second until every experiment
// found has all its shards and every expected experiment is found, or the
// wait is over; then it returns what it has, and the merge names what is
// missing.
func (a *app) awaitShards(ctx context.Context, args, expect []string, wait time.Duration, quiet bool) (map[string][]*analysis.ShardFile, error) {
	deadline := time.Now().Add(wait)
	said := false
	for {
		groups, missing, err := readShards(args, expect)
		if err == nil && missing == "" {
			return groups, nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return nil, badInput(err)
			}
			if len(groups) == 0 || slices.ContainsFunc(expect, func(e string) bool { return groups[e] == nil }) {
				return nil, badInput(fmt.Errorf("%s: no shards of %s", strings.Join(args, ", "), missing))
			}
			return groups, nil // MergeShards names the missing shards
		}
		if !quiet && !said {
			fmt.Fprintf(a.stderr, "waiting up to %v for shards (%s)\n", wait, missingText(err, missing))
			said = true
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func missingText(err error, missing string) string {
	if err != nil {
		return err.Error()
	}
	return "missing: " + missing
}

// readShards reads the shard files under args and groups them by
// experiment. missing describes what is not there yet ("" when every
// experiment has all its shards and every expected one is there).
func readShards(args, expect []string) (map[string][]*analysis.ShardFile, string, error) {
	paths, err := analysis.FindShards(args)
	if err != nil {
		return nil, "", err
	}
	groups := map[string][]*analysis.ShardFile{}
	for _, p := range paths {
		f, err := analysis.ReadShard(p)
		if err != nil {
			return nil, "", err
		}
		groups[f.Results.Experiment] = append(groups[f.Results.Experiment], f)
	}
	var missing []string
	for _, e := range expect {
		if groups[e] == nil {
			missing = append(missing, e)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(groups)) {
		have := map[int]bool{}
		for _, f := range groups[name] {
			have[f.Index] = true
		}
		if n := groups[name][0].Count; len(have) < n {
			missing = append(missing, fmt.Sprintf("%s (%d of %d shards)", name, len(have), n))
		}
	}
	return groups, strings.Join(missing, ", "), nil
}
