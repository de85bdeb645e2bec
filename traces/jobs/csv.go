package jobtrace

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/tracebed/tracebed/internal/problems"
)

// Columns of the native CSV format, in the order Write emits them.
var csvColumns = []string{"id", "arrival", "model", "workers", "iterations"}

// ParseCSV reads the native CSV format: a header naming the columns, then
// one job per row. Blank lines and lines starting with '#' are skipped.
func ParseCSV(file string, data []byte) ([]Job, error) {
	t, err := readTable(file, data, csvColumns, csvColumns[1:],
		"the header must name "+strings.Join(csvColumns[1:], ", ")+" (id is optional)")
	if err != nil {
		return nil, err
	}
	var jobs []Job
	var probs problems.List
	ids := map[int]int{}
	for row := 0; ; row++ {
		ok, err := t.next()
		if err != nil {
			probs.Add(err)
			continue
		}
		if !ok {
			break
		}
		j := Job{ID: row, Line: t.line}
		fields := []columnParser{
			{"arrival", func(s string) (err error) { j.Arrival, err = parseArrival(s); return }},
			{"model", func(s string) (err error) { j.Model, err = parseModel(s); return }},
			{"workers", func(s string) (err error) { j.Workers, err = parseCount(s, "workers", 1, MaxWorkers); return }},
			{"iterations", func(s string) (err error) { j.Iterations, err = parseCount(s, "iterations", 1, MaxIterations); return }},
		}
		if t.has("id") {
			fields = append([]columnParser{{"id", func(s string) (err error) { j.ID, err = parseCount(s, "for the job id", 0, 1<<31-1); return }}}, fields...)
		}
		if t.parseAll(fields, &probs) {
			if err := uniqueID(file, ids, j.ID, t.line, "id"); err != nil {
				probs.Add(err)
				continue
			}
			jobs = append(jobs, j)
		}
	}
	return check(file, jobs, &probs)
}

// columnParser parses one column of a row into a job.
type columnParser struct {
	col   string
	parse func(string) error
}

// table reads a CSV file with a header row and hands out each row's fields
// by column name, with their lines, for error messages.
type table struct {
	file  string
	r     *csv.Reader
	col   map[string]int
	width int
	rec   []string
	line  int
}

// readTable reads the header of a CSV file. Column names are matched without
// case or surrounding space; known, when not nil, lists the columns
// accepted; required those that must appear; format says what a header must
// hold, for the message about a missing column.
func readTable(file string, data []byte, known, required []string, format string) (*table, error) {
	r := newCSVReader(data)
	header, err := r.Read()
	if err != nil {
		return nil, csvError(file, r, err, "header")
	}
	t := &table{file: file, r: r, col: map[string]int{}, width: len(header)}
	for i, h := range header {
		name := strings.ToLower(strings.TrimSpace(h))
		line, _ := r.FieldPos(i)
		if known != nil && !slices.Contains(known, name) {
			return nil, errorf(file, line, "header", "unknown column %q; want %s", h, strings.Join(known, ", "))
		}
		if _, dup := t.col[name]; dup {
			return nil, errorf(file, line, "header", "column %q appears twice", name)
		}
		t.col[name] = i
	}
	for _, need := range required {
		if !t.has(need) {
			line, _ := r.FieldPos(0)
			return nil, errorf(file, line, "header", "no %q column; %s", need, format)
		}
	}
	return t, nil
}

// next reads the next row; it reports false at the end of the file.
func (t *table) next() (bool, error) {
	rec, err := t.r.Read()
	if errors.Is(err, io.EOF) {
		return false, nil
	}
	if err != nil {
		return false, csvError(t.file, t.r, err, "")
	}
	t.line, _ = t.r.FieldPos(0)
	if len(rec) != t.width {
		return false, errorf(t.file, t.line, "", "%d fields; the header has %d", len(rec), t.width)
	}
	t.rec = rec
	return true, nil
}

// parseAll parses the fields of the current row, recording every problem;
// it reports whether all parsed.
func (t *table) parseAll(fields []columnParser, p *problems.List) bool {
	ok := true
	for _, f := range fields {
		if err := t.parse(f.col, f.parse); err != nil {
			p.Add(err)
			ok = false
		}
	}
	return ok
}

// has reports whether the header names column.
func (t *table) has(column string) bool {
	_, ok := t.col[column]
	return ok
}

// parse hands the current row's field of column to f and turns its error
// into an Error naming the field's line and the column.
func (t *table) parse(column string, f func(string) error) error {
	i := t.col[column]
	if err := f(t.rec[i]); err != nil {
		line, _ := t.r.FieldPos(i)
		return errorf(t.file, line, column, "%v", err)
	}
	return nil
}

func newCSVReader(data []byte) *csv.Reader {
	r := csv.NewReader(bytes.NewReader(data))
	r.Comment = '#'
	r.FieldsPerRecord = -1
	r.TrimLeadingSpace = true
	r.ReuseRecord = false
	return r
}

// csvError turns an encoding/csv error into an Error with the line.
func csvError(file string, r *csv.Reader, err error, field string) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return errorf(file, pe.Line, field, "%v", pe.Err)
	}
	if errors.Is(err, io.EOF) {
		return errorf(file, 1, field, "empty file; want a header line (%s)", strings.Join(csvColumns, ","))
	}
	line, _ := r.FieldPos(0)
	return errorf(file, line, field, "%v", err)
}

// WriteCSV writes jobs in the native CSV format, after comments, each a
// line starting with "# ".
func WriteCSV(w io.Writer, jobs []Job, comments ...string) error {
	for _, c := range comments {
		for _, line := range strings.Split(c, "\n") {
			if _, err := fmt.Fprintf(w, "# %s\n", line); err != nil {
				return err
			}
		}
	}
	cw := csv.NewWriter(w)
	if err := cw.Write(csvColumns); err != nil {
		return err
	}
	for _, j := range jobs {
		if err := cw.Write([]string{
			fmt.Sprint(j.ID), FormatArrival(j.Arrival), j.Model, fmt.Sprint(j.Workers), fmt.Sprint(j.Iterations),
		}); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}
