package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/spf13/cobra"

	"github.com/tracebed/tracebed/analysis"
	"github.com/tracebed/tracebed/analysis/report"
	"github.com/tracebed/tracebed/experiments"
)

func (a *app) reportCommand() *cobra.Command {
	var (
		out    string
		title  string
		format *formatFlag
	)
	cmd := &cobra.Command{
		Use:   "report [flags] RESULTS_DIR...",
		Short: "Gather results directories into one report (tables, figures, provenance)",
		Long: `Write one report of the experiments in each RESULTS_DIR — a directory
holding results.json, or a directory of such directories such as results/.
For each experiment the report gives the exact command, seeds, spec hash,
tracebed version and commit and the machine that produced it (from
provenance.json), a command to reproduce it, its comparison tables and its
figures: a ready appendix for a paper's artifact evaluation.

Figures are drawn from results.json if figures.json is missing or stale.
Markdown image links are relative to the report file (--out).`,
		Example: "  tracebed report results > REPORT.md\n  tracebed report --out results/REPORT.md results\n  tracebed report --format csv results/incast",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rep, err := a.buildReport(args, title, true)
			if err != nil {
				return err
			}
			var b bytes.Buffer
			base := "."
			if out != "" {
				base = filepath.Dir(out)
			}
			switch format.value {
			case formatMarkdown:
				err = rep.WriteMarkdown(&b, base)
			case formatTable:
				err = rep.WriteText(&b)
			case formatCSV:
				var data []byte
				data, err = rep.CSV()
				b.Write(data)
			case formatJSON:
				var data []byte
				data, err = rep.JSON()
				b.Write(data)
			}
			if err != nil {
				return err
			}
			if out == "" {
				_, err = a.stdout.Write(b.Bytes())
				return err
			}
			if err := os.MkdirAll(base, 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(out, b.Bytes(), 0o644); err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "report of %d experiment(s) in %s\n", len(rep.Entries), out)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&out, "out", "o", "", "write the report to this file instead of stdout")
	f.StringVar(&title, "title", "tracebed results", "the report's title")
	format = addFormatFlag(f, formatMarkdown, "report format")
	return cmd
}

// buildReport gathers the results directories args name (as
// resultsDirs expands them) into a report.
// buildReport reads the results under args into a report; with draw, it
// draws each experiment's figures where they are missing or stale, else
// the report has none.
func (a *app) buildReport(args []string, title string, draw bool) (*report.Report, error) {
	dirs, benchPath, err := resultsDirs(args)
	if err != nil {
		return nil, badInput(err)
	}
	rep := &report.Report{Title: title}
	if benchPath != "" {
		if rep.Bench, err = report.ReadBench(benchPath); err != nil {
			return nil, badInput(err)
		}
		rep.BenchPath = benchPath
	}
	for _, dir := range dirs {
		e, err := a.reportEntry(dir, draw)
		if err != nil {
			return nil, err
		}
		rep.Entries = append(rep.Entries, e)
	}
	return rep, nil
}

// resultsDirs expands the arguments of report into results directories:
// a directory with results.json, a results.json file, or a directory whose
// subdirectories (sorted) hold results.json. It also returns the last
// bench.json named or found in a directory argument ("" if none).
func resultsDirs(args []string) (dirs []string, bench string, err error) {
	add := func(d string) {
		d = filepath.Clean(d)
		if !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	for _, arg := range args {
		fi, err := os.Stat(arg)
		if err != nil {
			return nil, "", err
		}
		if !fi.IsDir() {
			if _, err := report.ReadBench(arg); err == nil {
				bench = arg
				continue
			}
			add(filepath.Dir(arg))
			continue
		}
		if _, err := os.Stat(filepath.Join(arg, benchFile)); err == nil {
			bench = filepath.Join(arg, benchFile)
		}
		if _, err := os.Stat(filepath.Join(arg, analysis.ResultsFile)); err == nil {
			add(arg)
			continue
		}
		entries, err := os.ReadDir(arg)
		if err != nil {
			return nil, "", err
		}
		found := false
		for _, e := range entries {
			if e.IsDir() {
				if _, err := os.Stat(filepath.Join(arg, e.Name(), analysis.ResultsFile)); err == nil {
					add(filepath.Join(arg, e.Name()))
					found = true
				}
			}
		}
		if !found && bench == "" {
			return nil, "", fmt.Errorf("%s: no %s in it or in its subdirectories; run 'tracebed run --out %s' first", arg, analysis.ResultsFile, arg)
		}
	}
	return dirs, bench, nil
}

// benchFile is the name tracebed bench writes by default.
const benchFile = "bench.json"

// reportEntry loads one results directory for a report, drawing its
// figures when figures.json is missing or does not match results.json.
func (a *app) reportEntry(dir string, draw bool) (*report.ReportEntry, error) {
	res, err := analysis.Read(dir)
	if err != nil {
		return nil, badInput(err)
	}
	e := &report.ReportEntry{Dir: dir, Results: res}
	if p := res.Partial; p != nil {
		e.Notes = append(e.Notes, fmt.Sprintf("Partial results: %s after %d of %d runs; the tables hold the runs that finished.", p.Reason, p.Done, p.Of))
	}
	if p, err := analysis.ReadProvenance(dir); err == nil {
		e.Provenance = p
	} else if !errors.Is(err, fs.ErrNotExist) {
		e.Notes = append(e.Notes, "provenance.json is unreadable: "+err.Error())
	}
	if draw {
		figs := report.Figures(res)
		if idx, err := report.ReadFigures(dir); err != nil || !sameFigures(idx.Figures, figs) {
			if _, err := report.WriteFigures(dir, figs); err != nil {
				return nil, err
			}
			fmt.Fprintf(a.stderr, "%s: drew %d figures from %s\n", dir, len(figs), analysis.ResultsFile)
		}
		e.Figures = figs
	}
	e.Tables, e.Notes = a.tablesFor(res, e.Notes)
	return e, nil
}

func sameFigures(a, b []report.Figure) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(ja, jb)
}

// tablesFor returns the comparison tables of res plus the experiment's own
// tables (gains over a baseline, …) when its spec is at hand and unchanged
// (same SHA-256); otherwise the comparison tables and a note.
func (a *app) tablesFor(res *analysis.Results, notes []string) ([]analysis.Table, []string) {
	spec, err := experiments.Open(res.Spec, a.readEmbedded)
	if err != nil {
		return res.Comparison(), append(notes, fmt.Sprintf("The spec %s is not at hand (%v), so only the comparison tables are shown.", res.Spec, err))
	}
	if spec.Hash != res.SpecHash {
		return res.Comparison(), append(notes, fmt.Sprintf("The spec %s has changed since these results were made (SHA-256 %.12s…, results say %.12s…), so only the comparison tables are shown.", res.Spec, spec.Hash, res.SpecHash))
	}
	exp, err := a.registry.Compile(spec)
	if err != nil {
		return res.Comparison(), append(notes, fmt.Sprintf("The spec %s does not compile with this tracebed (%v), so only the comparison tables are shown.", res.Spec, err))
	}
	return experiments.Tables(exp, res), notes
}
