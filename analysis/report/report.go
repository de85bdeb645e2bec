// Package report turns results into what people read and compare: the
// figures of an experiment (built from the data, rendered to PNG and SVG
// with gonum/plot, their data kept in figures.json), the Markdown report of
// several experiments, benchmark files (bench.json, from Go's benchmark
// format with golang.org/x/perf) and regression comparisons of results or
// benchmarks. The command uses it; experiments and workloads write only the
// results schema (package analysis) and never import it.
package report

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/tracebed/tracebed/analysis"
)

// Report gathers several results directories into one document for a
// paper's artifact appendix: how each experiment was produced (the exact
// command, seeds, spec hash, tracebed version and commit, machine), its
// tables and its figures.
type Report struct {
	Title   string         `json:"title"`
	Entries []*ReportEntry `json:"experiments"`
	// Bench, when set, adds the performance benchmarks (bench.json at
	// BenchPath) as a last section.
	Bench     *Bench `json:"-"`
	BenchPath string `json:"-"`
}

// ReportEntry is one experiment of a report.
type ReportEntry struct {
	Dir        string               `json:"dir"` // the results directory
	Results    *analysis.Results    `json:"-"`
	Tables     []analysis.Table     `json:"tables"`
	Figures    []Figure             `json:"-"`
	Provenance *analysis.Provenance `json:"provenance,omitempty"` // nil when the directory has no provenance.json
	Notes      []string             `json:"notes,omitempty"`
}

// Reproduce returns a command that reruns the entry's experiment with the
// same spec, substrate and seeds (the spec's own seeds when there are
// several).
func (e *ReportEntry) Reproduce() string {
	r := e.Results
	args := []string{"tracebed", "run", r.Spec}
	if r.Spec == "" {
		args[2] = r.Experiment
	}
	if r.Substrate != "" && r.Substrate != "sim" {
		args = append(args, "--substrate", r.Substrate)
	}
	if len(r.Seeds) == 1 {
		args = append(args, "--seed", strconv.FormatInt(r.Seeds[0], 10))
	}
	return analysis.ShellQuote(args)
}

// images lists the image files of the entry's figures that exist on disk
// as recorded in figures.json; Figures and formats come from there.
func (e *ReportEntry) image(f Figure, format string) string {
	return filepath.Join(e.Dir, f.Name+"."+format)
}

// WriteMarkdown writes the report as Markdown. Image links are relative to
// base, the directory the report file is in.
func (rep *Report) WriteMarkdown(w io.Writer, base string) error {
	var b bytes.Buffer
	title := rep.Title
	if title == "" {
		title = "tracebed results"
	}
	fmt.Fprintf(&b, "# %s\n\n", title)
	if ms := rep.machines(); len(ms) == 1 {
		fmt.Fprintf(&b, "All experiments ran on: %s.\n\n", ms[0])
	}
	if len(rep.Entries) > 1 {
		b.WriteString("Experiments:\n\n")
		for _, e := range rep.Entries {
			fmt.Fprintf(&b, "- [%s](#%s) — %d runs, %d figures\n", e.Results.Experiment, anchor(e.Results.Experiment), len(e.Results.Runs), len(e.Figures))
		}
		if rep.Bench != nil {
			b.WriteString("- [Performance](#performance)\n")
		}
		b.WriteString("\n")
	}
	for _, e := range rep.Entries {
		r := e.Results
		fmt.Fprintf(&b, "## %s\n\n", r.Experiment)
		b.WriteString("| | |\n|---|---|\n")
		row := func(k, v string) { fmt.Fprintf(&b, "| %s | %s |\n", k, strings.ReplaceAll(v, "|", `\|`)) }
		row("spec", fmt.Sprintf("`%s` (SHA-256 `%s`)", r.Spec, r.SpecHash))
		row("kind, substrate", fmt.Sprintf("%s on %s, scale %g", r.Kind, r.Substrate, r.Scale))
		row("policies", strings.Join(r.Policies, ", "))
		row("scenarios", strings.Join(r.Scenarios, ", "))
		row("seeds", joinInts(r.Seeds))
		row("tracebed", versionString(r.Version, r.Commit))
		if p := e.Provenance; p != nil {
			row("command", "`"+p.Command+"`")
			row("machine", p.Machine.String())
			row("started", fmt.Sprintf("%s; %d runs in %.1f s wall time, %d at once", p.Started, p.Runs, p.WallS, p.Parallel))
			if len(p.Shards) > 0 {
				row("shards", p.ShardSummary())
			}
		} else {
			row("command", "not recorded (no provenance.json)")
			row("machine", "not recorded")
		}
		row("results", "`"+filepath.ToSlash(rel(base, filepath.Join(e.Dir, analysis.ResultsFile)))+"`")
		fmt.Fprintf(&b, "\nTo reproduce:\n\n```sh\n%s\n```\n\n", e.Reproduce())
		for _, n := range e.Notes {
			fmt.Fprintf(&b, "> %s\n\n", n)
		}
		for _, t := range e.Tables {
			t.Title = strings.TrimPrefix(t.Title, r.Experiment+" — ")
			if err := t.WriteMarkdown(&b); err != nil {
				return err
			}
		}
		if len(e.Figures) > 0 {
			b.WriteString("### Figures\n\n")
		}
		for i, f := range e.Figures {
			png := filepath.ToSlash(rel(base, e.image(f, PNG)))
			svg := filepath.ToSlash(rel(base, e.image(f, SVG)))
			fmt.Fprintf(&b, "![%s](%s)\n\n*Figure %s.%d: %s* ([SVG](%s), data in `%s`)\n\n", f.Title, png, r.Experiment, i+1, f.Caption, svg, FiguresFile)
		}
	}
	if bn := rep.Bench; bn != nil {
		fmt.Fprintf(&b, "## Performance\n\n`%s`: tracebed bench on %s, %s, tracebed %s, -benchtime %s.\n\n",
			filepath.ToSlash(rel(base, rep.BenchPath)), bn.Machine, bn.Date, versionString(bn.Version, bn.Commit), bn.Benchtime)
		for _, t := range bn.Tables() {
			if err := t.WriteMarkdown(&b); err != nil {
				return err
			}
		}
	}
	_, err := w.Write(b.Bytes())
	return err
}

// WriteText writes the report for a terminal: provenance, tables, and
// the figure files.
func (rep *Report) WriteText(w io.Writer) error {
	for _, e := range rep.Entries {
		r := e.Results
		fmt.Fprintf(w, "%s (%s on %s, seeds %s, tracebed %s)\n", r.Experiment, r.Kind, r.Substrate, joinInts(r.Seeds), versionString(r.Version, r.Commit))
		fmt.Fprintf(w, "  spec:      %s (sha256 %s)\n", r.Spec, r.SpecHash)
		if p := e.Provenance; p != nil {
			fmt.Fprintf(w, "  command:   %s\n  machine:   %s\n  started:   %s (%.1f s)\n", p.Command, p.Machine, p.Started, p.WallS)
			if len(p.Shards) > 0 {
				fmt.Fprintf(w, "  shards:    %s\n", p.ShardSummary())
			}
		}
		fmt.Fprintf(w, "  reproduce: %s\n", e.Reproduce())
		for _, n := range e.Notes {
			fmt.Fprintf(w, "  note: %s\n", n)
		}
		fmt.Fprintln(w)
		for _, t := range e.Tables {
			if err := t.WriteText(w); err != nil {
				return err
			}
		}
		if len(e.Figures) > 0 {
			fmt.Fprintf(w, "%d figures in %s:\n", len(e.Figures), e.Dir)
			for _, f := range e.Figures {
				fmt.Fprintf(w, "  %s.{png,svg}  %s\n", f.Name, f.Caption)
			}
			fmt.Fprintln(w)
		}
	}
	if rep.Bench != nil {
		fmt.Fprintf(w, "%s: tracebed bench, %s\n\n", rep.BenchPath, rep.Bench.Date)
		for _, t := range rep.Bench.Tables() {
			if err := t.WriteText(w); err != nil {
				return err
			}
		}
	}
	return nil
}

// CSV returns every run of every experiment in long form: one row per
// (experiment, scenario, policy, seed, metric).
func (rep *Report) CSV() ([]byte, error) {
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	if err := w.Write([]string{"experiment", "substrate", "scenario", "policy", "seed", "metric", "unit", "better", "value"}); err != nil {
		return nil, err
	}
	for _, e := range rep.Entries {
		r := e.Results
		for _, run := range r.Runs {
			for _, m := range r.Metrics {
				v, ok := run.Metrics[m.Name]
				if !ok {
					continue
				}
				row := []string{r.Experiment, r.Substrate, run.Scenario, run.Policy, strconv.FormatInt(run.Seed, 10), m.Name, m.Unit, string(m.Better), strconv.FormatFloat(v, 'g', -1, 64)}
				if err := w.Write(row); err != nil {
					return nil, err
				}
			}
		}
	}
	w.Flush()
	return b.Bytes(), w.Error()
}

// JSON returns the report as JSON: per experiment its identity,
// provenance, tables and figure files.
func (rep *Report) JSON() ([]byte, error) {
	type fig struct {
		Name    string `json:"name"`
		Title   string `json:"title"`
		Caption string `json:"caption"`
		PNG     string `json:"png"`
		SVG     string `json:"svg"`
	}
	type entry struct {
		Experiment string               `json:"experiment"`
		Kind       string               `json:"kind"`
		Substrate  string               `json:"substrate"`
		Spec       string               `json:"spec"`
		SpecHash   string               `json:"spec_hash"`
		Seeds      []int64              `json:"seeds"`
		Version    string               `json:"tracebed_version"`
		Commit     string               `json:"commit,omitempty"`
		Reproduce  string               `json:"reproduce"`
		Dir        string               `json:"dir"`
		Provenance *analysis.Provenance `json:"provenance,omitempty"`
		Tables     []analysis.Table     `json:"tables"`
		Figures    []fig                `json:"figures"`
		Notes      []string             `json:"notes,omitempty"`
	}
	out := struct {
		Title       string  `json:"title"`
		Experiments []entry `json:"experiments"`
	}{Title: rep.Title, Experiments: []entry{}}
	for _, e := range rep.Entries {
		r := e.Results
		en := entry{
			Experiment: r.Experiment, Kind: r.Kind, Substrate: r.Substrate, Spec: r.Spec, SpecHash: r.SpecHash,
			Seeds: r.Seeds, Version: r.Version, Commit: r.Commit, Reproduce: e.Reproduce(), Dir: filepath.ToSlash(e.Dir),
			Provenance: e.Provenance, Tables: e.Tables, Figures: []fig{}, Notes: e.Notes,
		}
		for _, f := range e.Figures {
			en.Figures = append(en.Figures, fig{f.Name, f.Title, f.Caption, filepath.ToSlash(e.image(f, PNG)), filepath.ToSlash(e.image(f, SVG))})
		}
		out.Experiments = append(out.Experiments, en)
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

func (rep *Report) machines() []string {
	var ms []string
	for _, e := range rep.Entries {
		if e.Provenance == nil {
			return nil
		}
		if m := e.Provenance.Machine.String(); !slices.Contains(ms, m) {
			ms = append(ms, m)
		}
	}
	return ms
}

func versionString(v, commit string) string {
	if commit != "" {
		return v + ", commit " + commit
	}
	return v
}

func joinInts(xs []int64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.FormatInt(x, 10)
	}
	return strings.Join(s, ", ")
}

// anchor is the GitHub heading anchor of a heading text.
func anchor(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// rel returns path relative to base when it can, else path.
func rel(base, path string) string {
	if base == "" {
		base = "."
	}
	ab, err1 := filepath.Abs(base)
	ap, err2 := filepath.Abs(path)
	if err1 != nil || err2 != nil {
		return path
	}
	r, err := filepath.Rel(ab, ap)
	if err != nil {
		return path
	}
	return r
}
