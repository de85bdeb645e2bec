package jobtrace

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Columns of the native CSV format, in the order Write emits them.
var csvColumns = []string{"id", "arrival", "model", "workers", "iterations"}

// ParseCSV reads the native CSV format: a header naming the columns, then
// one job per row. Blank lines and lines starting with '#' are skipped.
func ParseCSV(file string, data []byte) ([]Job, error) {
	r := newCSVReader(data)
	header, err := r.Read()
	if err != nil {
		return nil, csvError(file, r, err, "header")
	}
	col := map[string]int{}
	for i, h := range header {
		name := strings.ToLower(strings.TrimSpace(h))
		line, _ := r.FieldPos(i)
		if !slices.Contains(csvColumns, name) {
			return nil, errorf(file, line, "header", "unknown column %q; want %s", h, strings.Join(csvColumns, ", "))
		}
		if _, dup := col[name]; dup {
			return nil, errorf(file, line, "header", "column %q appears twice", name)
		}
		col[name] = i
	}
	for _, need := range csvColumns[1:] {
		if _, ok := col[need]; !ok {
			line, _ := r.FieldPos(0)
			return nil, errorf(file, line, "header", "no %q column; the header must name %s (id is optional)", need, strings.Join(csvColumns[1:], ", "))
		}
	}
	var jobs []Job
	ids := map[int]int{}
	for row := 0; ; row++ {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, csvError(file, r, err, "")
		}
		line, _ := r.FieldPos(0)
		if len(rec) != len(header) {
			return nil, errorf(file, line, "", "%d fields; the header has %d", len(rec), len(header))
		}
		field := func(name string) (string, int) {
			i := col[name]
			l, _ := r.FieldPos(i)
			return rec[i], l
		}
		j := Job{ID: row, Line: line}
		if _, ok := col["id"]; ok {
			s, l := field("id")
			if j.ID, err = parseCount(s, "for the job id", 0, 1<<31-1); err != nil {
				return nil, errorf(file, l, "id", "%v", err)
			}
		}
		s, l := field("arrival")
		if j.Arrival, err = parseArrival(s); err != nil {
			return nil, errorf(file, l, "arrival", "%v", err)
		}
		s, l = field("model")
		if j.Model, err = parseModel(s); err != nil {
			return nil, errorf(file, l, "model", "%v", err)
		}
		s, l = field("workers")
		if j.Workers, err = parseCount(s, "workers", 1, MaxWorkers); err != nil {
			return nil, errorf(file, l, "workers", "%v", err)
		}
		s, l = field("iterations")
		if j.Iterations, err = parseCount(s, "iterations", 1, MaxIterations); err != nil {
			return nil, errorf(file, l, "iterations", "%v", err)
		}
		if err := uniqueID(file, ids, j.ID, line, "id"); err != nil {
			return nil, err
		}
		jobs = append(jobs, j)
	}
	return check(file, jobs, ids)
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

// WriteCSV writes jobs in the native CSV format.
func WriteCSV(w io.Writer, jobs []Job) error {
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
