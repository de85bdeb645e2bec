package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/tracebed/tracebed/analysis"
	"github.com/tracebed/tracebed/analysis/report"
	"github.com/tracebed/tracebed/experiments"
)

// runInfo is what tracebed run knows about an execution beyond its results.
type runInfo struct {
	start    time.Time
	wall     time.Duration
	parallel int
}

// writeArtifacts writes, next to results.json in dir, the per-entity tables
// of the runs (hosts.csv, …), the figures (PNG, SVG and figures.json)
// unless plots is false, and provenance.json (the command line, the
// machine, the wall time). None touches results.json, which stays
// byte-identical for the same spec and seeds.
func (a *app) writeArtifacts(dir string, res *analysis.Results, info runInfo, plots bool) error {
	return writeArtifacts(dir, res, a.provenance(res, info), plots)
}

// writeArtifacts writes the figures of res (unless plots is false) and
// prov to dir.
func writeArtifacts(dir string, res *analysis.Results, prov analysis.Provenance, plots bool) error {
	for _, name := range res.EntityTables() {
		data, err := res.EntityCSV(name)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name+".csv"), data, 0o644); err != nil {
			return err
		}
	}
	if plots {
		if _, err := report.WriteFigures(dir, report.Figures(res)); err != nil {
			return fmt.Errorf("plots of %s: %w", res.Experiment, err)
		}
	}
	return analysis.WriteProvenance(dir, prov)
}

// writePartial writes the results of an execution that stopped early
// (res.Partial) under out: results.json (with its partial field), the CSV
// files, results.md and provenance.json, but no figures, so that an
// interrupted command ends at once. It returns the directory.
func (a *app) writePartial(out string, exp experiments.Experiment, res *analysis.Results, info runInfo) (string, error) {
	dir, err := experiments.Write(out, res, experiments.Tables(exp, res))
	if err != nil {
		return "", err
	}
	return dir, writeArtifacts(dir, res, a.provenance(res, info), false)
}

// provenance is the record of this command's execution of res.
func (a *app) provenance(res *analysis.Results, info runInfo) analysis.Provenance {
	return analysis.Provenance{
		Command:    a.commandLine(),
		Experiment: res.Experiment,
		Started:    info.start.UTC().Format(time.RFC3339),
		WallS:      float64(info.wall.Round(time.Millisecond)) / float64(time.Second),
		Runs:       len(res.Runs),
		Partial:    res.Partial != nil,
		Parallel:   info.parallel,
		Version:    version,
		Commit:     buildCommit(),
		Machine:    analysis.CurrentMachine(),
	}
}

// commandLine is this command line, shell-quoted, as "tracebed …".
func (a *app) commandLine() string {
	return analysis.ShellQuote(append([]string{"tracebed"}, a.args...))
}

// printResults prints one experiment's outcome on stdout in format: its
// tables (table, markdown), its runs (csv, as results.csv) or its results
// file (json, as results.json; several experiments give a stream of JSON
// objects).
func printResults(w io.Writer, format string, res *analysis.Results, tables []analysis.Table) error {
	switch format {
	case formatJSON:
		data, err := res.Marshal()
		if err != nil {
			return err
		}
		_, err = w.Write(data)
		return err
	case formatCSV:
		data, err := res.CSV()
		if err != nil {
			return err
		}
		_, err = w.Write(data)
		return err
	}
	return writeTables(w, format, tables)
}

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}
