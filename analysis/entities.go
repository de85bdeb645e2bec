package analysis

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"math"
	"slices"
)

// EntityTable is a per-entity breakdown of one run: a row per entity (a
// paging host of a far-memory run, a job of an INA run, …), each with the
// same text labels (an application, the switches a job aggregated on) and
// numeric columns (times, counts). Runs carry their tables in results.json
// (Run.Tables), self-describing so that runs merged from several files stay
// readable; 'tracebed run' also writes every table of every run to
// <name>.csv next to results.csv (Results.EntityCSV).
//
// Columns are MetricInfo: a name, a unit and a description, like metrics.
// Values are in each column's unit, exact; tables for people choose human
// units (DisplayFor).
type EntityTable struct {
	// Name names the table and its CSV file ("hosts", "jobs").
	Name string `json:"name"`
	// Entity is what a row is ("host", "job"); it heads the id column.
	Entity string `json:"entity"`
	// Labels are the text columns, in order.
	Labels []string `json:"labels,omitempty"`
	// Columns are the numeric columns, in order.
	Columns []MetricInfo `json:"columns"`
	Rows    []EntityRow  `json:"rows"`
}

// EntityRow is one entity: its id, its labels and its values, by column
// name (a column without a value is left out).
type EntityRow struct {
	ID     string             `json:"id"`
	Labels map[string]string  `json:"labels,omitempty"`
	Values map[string]float64 `json:"values"`
}

// Validate checks a table: a name, unique columns and row ids, and every
// value finite and in a declared column.
func (t *EntityTable) Validate() error {
	if t.Name == "" || t.Entity == "" {
		return fmt.Errorf("table %q: want a name and an entity", t.Name)
	}
	cols := map[string]bool{}
	for i, c := range t.Columns {
		if c.Name == "" || cols[c.Name] || slices.Contains(t.Labels, c.Name) {
			return fmt.Errorf("table %s: columns[%d] %q is empty or defined twice", t.Name, i, c.Name)
		}
		switch c.Better {
		case Lower, Higher, Either:
		default:
			return fmt.Errorf("table %s: column %s: better is %q; want %q, %q or absent", t.Name, c.Name, c.Better, Lower, Higher)
		}
		cols[c.Name] = true
	}
	ids := map[string]bool{}
	for i, r := range t.Rows {
		if ids[r.ID] {
			return fmt.Errorf("table %s: rows[%d]: %s %q appears twice", t.Name, i, t.Entity, r.ID)
		}
		ids[r.ID] = true
		for k, v := range r.Values {
			if !cols[k] {
				return fmt.Errorf("table %s: %s %s: value %s has no column", t.Name, t.Entity, r.ID, k)
			}
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return fmt.Errorf("table %s: %s %s: %s is %v", t.Name, t.Entity, r.ID, k, v)
			}
		}
		for k := range r.Labels {
			if !slices.Contains(t.Labels, k) {
				return fmt.Errorf("table %s: %s %s: label %s is not in labels", t.Name, t.Entity, r.ID, k)
			}
		}
	}
	return nil
}

// Table returns the run's table named name, or nil.
func (r *Run) Table(name string) *EntityTable {
	for i := range r.Tables {
		if r.Tables[i].Name == name {
			return &r.Tables[i]
		}
	}
	return nil
}

// EntityTables lists the names of the per-entity tables the runs carry, in
// order of first appearance.
func (r *Results) EntityTables() []string {
	var names []string
	for _, run := range r.Runs {
		for _, t := range run.Tables {
			if !slices.Contains(names, t.Name) {
				names = append(names, t.Name)
			}
		}
	}
	return names
}

// EntityCSV returns the rows of table name of every run as CSV: the run
// (experiment, scenario, policy, seed), the entity's id, its labels, then
// its values, exact, in each column's unit; a column's unit is in its
// header ("blocked_s"), or appended to it in brackets where its name does
// not say it ("evictions [pages]").
func (r *Results) EntityCSV(name string) ([]byte, error) {
	var labels []string
	var cols []MetricInfo
	entity := ""
	for _, run := range r.Runs {
		t := run.Table(name)
		if t == nil {
			continue
		}
		entity = t.Entity
		for _, l := range t.Labels {
			if !slices.Contains(labels, l) {
				labels = append(labels, l)
			}
		}
		for _, c := range t.Columns {
			if !slices.ContainsFunc(cols, func(m MetricInfo) bool { return m.Name == c.Name }) {
				cols = append(cols, c)
			}
		}
	}
	if entity == "" {
		return nil, fmt.Errorf("no run has a table %q", name)
	}
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	head := append([]string{"experiment", "scenario", "policy", "seed", entity}, labels...)
	for _, c := range cols {
		h := c.Name
		if d := (Display{Unit: c.Unit}); c.Unit != "" && d.Header(c.Name) != c.Name {
			h += " [" + c.Unit + "]"
		}
		head = append(head, h)
	}
	if err := w.Write(head); err != nil {
		return nil, err
	}
	for _, run := range r.Runs {
		t := run.Table(name)
		if t == nil {
			continue
		}
		for _, row := range t.Rows {
			rec := []string{r.Experiment, run.Scenario, run.Policy, fmt.Sprint(run.Seed), row.ID}
			for _, l := range labels {
				rec = append(rec, row.Labels[l])
			}
			for _, c := range cols {
				if v, ok := row.Values[c.Name]; ok {
					rec = append(rec, ExactNumber(v))
				} else {
					rec = append(rec, "")
				}
			}
			if err := w.Write(rec); err != nil {
				return nil, err
			}
		}
	}
	w.Flush()
	return b.Bytes(), w.Error()
}

// Text renders the table of one run for people: a row per entity, each
// column in one human unit named in its header.
func (t *EntityTable) Text(title string) Table {
	out := Table{Title: title, Header: append([]string{t.Entity}, t.Labels...)}
	displays := make([]Display, len(t.Columns))
	for i, c := range t.Columns {
		var vals []float64
		for _, r := range t.Rows {
			if v, ok := r.Values[c.Name]; ok {
				vals = append(vals, v)
			}
		}
		displays[i] = DisplayFor(c.Unit, vals...)
		out.Header = append(out.Header, displays[i].Header(c.Name))
	}
	for _, r := range t.Rows {
		row := append([]string{r.ID}, make([]string, len(t.Labels))...)
		for i, l := range t.Labels {
			row[1+i] = r.Labels[l]
		}
		for i, c := range t.Columns {
			if v, ok := r.Values[c.Name]; ok {
				row = append(row, displays[i].Format(v))
			} else {
				row = append(row, "–")
			}
		}
		out.Rows = append(out.Rows, row)
	}
	return out
}
