package analysis

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"
)

// Table is a titled grid of cells, rendered for the terminal, Markdown or CSV.
type Table struct {
	Title  string     `json:"title"`
	Header []string   `json:"header"`
	Rows   [][]string `json:"rows"`
	Notes  []string   `json:"notes,omitempty"` // printed under the table
	// CSVHeader and CSVRows, when set, are what WriteCSV writes instead of
	// Header and Rows: exact numbers in each metric's own unit, where
	// Rows hold them in human units for reading.
	CSVHeader []string   `json:"-"`
	CSVRows   [][]string `json:"-"`
}

// Comparison returns one table per scenario: a row per policy, a column per
// metric (mean over seeds, with ± the standard deviation when seeds > 1).
// Each column shows its values in one human unit, named in its header
// (DisplayFor); the CSV form keeps the exact values.
func (r *Results) Comparison() []Table {
	var tables []Table
	for _, sc := range r.Scenarios {
		t := Table{Title: fmt.Sprintf("%s — scenario %s (%s, %d seed(s))", r.Experiment, sc, r.Substrate, len(r.Seeds))}
		var aggs []map[string]Summary
		var policies []string
		for _, p := range r.Policies {
			if agg := r.Aggregate(sc, p); len(agg) > 0 {
				aggs, policies = append(aggs, agg), append(policies, p)
			}
		}
		t.Header = append(t.Header, "policy")
		t.CSVHeader = append(t.CSVHeader, "policy")
		displays := make([]Display, len(r.Metrics))
		for i, m := range r.Metrics {
			var vals []float64
			for _, agg := range aggs {
				if s, ok := agg[m.Name]; ok {
					vals = append(vals, s.Mean)
				}
			}
			displays[i] = DisplayFor(m.Unit, vals...)
			t.Header = append(t.Header, displays[i].Header(m.Name))
			t.CSVHeader = append(t.CSVHeader, m.Name, m.Name+"_std")
		}
		for k, agg := range aggs {
			row, exact := []string{policies[k]}, []string{policies[k]}
			for i, m := range r.Metrics {
				s, ok := agg[m.Name]
				switch {
				case !ok:
					row = append(row, "–")
					exact = append(exact, "", "")
					continue
				case s.N > 1 && s.Std > 0:
					row = append(row, displays[i].Format(s.Mean)+" ± "+displays[i].Format(s.Std))
				default:
					row = append(row, displays[i].Format(s.Mean))
				}
				exact = append(exact, ExactNumber(s.Mean), ExactNumber(s.Std))
			}
			t.Rows = append(t.Rows, row)
			t.CSVRows = append(t.CSVRows, exact)
		}
		tables = append(tables, t)
	}
	return tables
}

// ExactNumber formats v so that parsing the text gives v back.
func ExactNumber(v float64) string {
	if a := math.Abs(v); a >= 1e-6 && a < 1e21 || v == 0 {
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// WriteText renders t for a terminal with box-drawing borders.
func (t Table) WriteText(w io.Writer) error {
	if t.Title != "" {
		fmt.Fprintln(w, t.Title)
	}
	tab := tablewriter.NewTable(w,
		tablewriter.WithRenderer(renderer.NewBlueprint(tw.Rendition{Symbols: tw.NewSymbols(tw.StyleLight)})),
		tablewriter.WithHeaderAutoFormat(tw.Off),
		tablewriter.WithRowAlignment(tw.AlignRight),
	)
	tab.Header(t.Header)
	if err := tab.Bulk(t.Rows); err != nil {
		return err
	}
	if err := tab.Render(); err != nil {
		return err
	}
	for _, n := range t.Notes {
		fmt.Fprintln(w, n)
	}
	fmt.Fprintln(w)
	return nil
}

// WriteMarkdown renders t as a GitHub-flavoured Markdown table.
func (t Table) WriteMarkdown(w io.Writer) error {
	if t.Title != "" {
		fmt.Fprintf(w, "### %s\n\n", t.Title)
	}
	esc := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	line := func(cells []string) {
		for i := range cells {
			cells[i] = esc(cells[i])
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
	line(append([]string(nil), t.Header...))
	sep := make([]string, len(t.Header))
	for i := range sep {
		sep[i] = "---:"
		if i == 0 {
			sep[i] = "---"
		}
	}
	fmt.Fprintf(w, "|%s|\n", strings.Join(sep, "|"))
	for _, r := range t.Rows {
		line(append([]string(nil), r...))
	}
	for _, n := range t.Notes {
		fmt.Fprintf(w, "\n%s\n", n)
	}
	fmt.Fprintln(w)
	return nil
}

// CSV returns every run as one CSV row: scenario, policy, seed, then each
// metric in the order of r.Metrics.
func (r *Results) CSV() ([]byte, error) {
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	head := []string{"experiment", "scenario", "policy", "seed"}
	for _, m := range r.Metrics {
		head = append(head, m.Name)
	}
	if err := w.Write(head); err != nil {
		return nil, err
	}
	for _, run := range r.Runs {
		row := []string{r.Experiment, run.Scenario, run.Policy, fmt.Sprint(run.Seed)}
		for _, m := range r.Metrics {
			if v, ok := run.Metrics[m.Name]; ok {
				row = append(row, fmt.Sprint(v))
			} else {
				row = append(row, "")
			}
		}
		if err := w.Write(row); err != nil {
			return nil, err
		}
	}
	w.Flush()
	return b.Bytes(), w.Error()
}

// WriteCSV writes tables as CSV: each table's header and rows with the
// table's title as a first column, so that rows of several tables (one per
// scenario, say) stay distinguishable; tables are separated by an empty
// line. Notes are left out. Tables with exact values (CSVRows) give those.
func WriteCSV(w io.Writer, tables []Table) error {
	for i, t := range tables {
		if i > 0 {
			if _, err := io.WriteString(w, "\n"); err != nil {
				return err
			}
		}
		header, rows := t.Header, t.Rows
		if t.CSVRows != nil {
			header, rows = t.CSVHeader, t.CSVRows
		}
		cw := csv.NewWriter(w)
		if err := cw.Write(append([]string{"table"}, header...)); err != nil {
			return err
		}
		for _, r := range rows {
			if err := cw.Write(append([]string{t.Title}, r...)); err != nil {
				return err
			}
		}
		cw.Flush()
		if err := cw.Error(); err != nil {
			return err
		}
	}
	return nil
}
