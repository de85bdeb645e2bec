// Package jobtrace reads, writes and generates traces of deep-learning
// training jobs for the INA experiments: when each job arrives, which model
// it trains, on how many workers and for how many iterations.
//
// Four formats are read:
//
//   - CSV with a header naming the columns (any order, extra columns are an
//     error): id (optional), arrival, model, workers, iterations;
//   - JSON Lines, one object per line with the same keys;
//   - the Tiresias simulator's CSV (job_id, num_gpu, submit_time,
//     iterations, model_name, duration, interval), recognised by its header;
//   - Gavel's tab-separated traces (".trace"), such as its Microsoft Philly
//     traces, whose job types map to tracebed's models (gavel.go).
//
// An arrival is a number of seconds ("12.5") or a Go duration ("1m30s").
// Every error names the file, the line and the field, and says what would be
// accepted. Model names are checked against traces/models.
//
// Parse reports every problem of a file (up to MaxProblems), each with its
// line and field. Compress shortens a trace in time; ParseCompressed reads
// and shortens it (a Gavel trace before its iterations are rounded).
//
// The package also embeds sample traces (Samples), among them copies of the
// Tiresias 60-job trace and of a Philly virtual cluster's jobs in Gavel's
// format (see README.md in this directory).
package jobtrace

import (
	"embed"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tracebed/tracebed/internal/problems"
	"github.com/tracebed/tracebed/traces/models"
)

// Samples holds the traces shipped with tracebed, by file name
// ("tiresias-60job.csv", "sample.csv", "sample.jsonl").
//
//go:embed *.csv *.jsonl *.trace
var Samples embed.FS

// Job is one training job of a trace.
type Job struct {
	ID         int
	Arrival    time.Duration // since the start of the trace
	Model      string        // a traces/models profile name
	Workers    int           // one worker per host
	Iterations int
	Line       int // line of the trace it came from (0 if generated)
}

// Limits on the values a trace may hold.
const (
	MaxWorkers    = 4096
	MaxIterations = 100_000_000
	MaxArrival    = 365 * 24 * time.Hour
)

// Error is an input error in a trace: file, line and field.
type Error struct {
	File  string
	Line  int
	Field string // "" for errors about a whole line
	Msg   string
}

func (e *Error) Error() string {
	switch {
	case e.Line == 0:
		return fmt.Sprintf("%s: %s", e.File, e.Msg)
	case e.Field == "":
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s:%d: %s: %s", e.File, e.Line, e.Field, e.Msg)
}

func errorf(file string, line int, field, format string, args ...any) *Error {
	return &Error{File: file, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Format is a trace file format.
type Format string

// Formats Parse recognises.
const (
	CSV      Format = "csv"
	JSONL    Format = "jsonl"
	Tiresias Format = "tiresias"
	Gavel    Format = "gavel"
)

// Parse reads a trace in any of the formats, chosen by the file's extension
// (.jsonl, .ndjson: JSON Lines; .trace: Gavel's; .csv: by its header) or,
// without one of these, by its content. Jobs are returned in arrival order
// (ties keep file order).
func Parse(file string, data []byte) ([]Job, Format, error) {
	lower := strings.ToLower(file)
	if strings.HasSuffix(lower, ".jsonl") || strings.HasSuffix(lower, ".ndjson") {
		jobs, err := ParseJSONL(file, data)
		return jobs, JSONL, err
	}
	if strings.HasSuffix(lower, ".trace") || !strings.HasSuffix(lower, ".csv") && IsGavel(data) {
		jobs, err := ParseGavel(file, data)
		return jobs, Gavel, err
	}
	if IsTiresias(data) {
		jobs, err := ParseTiresias(file, data)
		return jobs, Tiresias, err
	}
	jobs, err := ParseCSV(file, data)
	return jobs, CSV, err
}

// ParseCompressed reads a trace as Parse does and compresses it in time by
// factor (1: as recorded): a Gavel trace's run times before its iterations
// are rounded (ParseGavelCompressed), any other trace's arrivals and
// iterations after (Compress).
func ParseCompressed(file string, data []byte, factor float64) ([]Job, Format, error) {
	if !(factor >= 1) || math.IsInf(factor, 0) {
		return nil, "", errorf(file, 0, "", "time compression %v: want a factor of 1 or more", factor)
	}
	lower := strings.ToLower(file)
	if strings.HasSuffix(lower, ".trace") || !strings.HasSuffix(lower, ".csv") && !strings.HasSuffix(lower, ".jsonl") && !strings.HasSuffix(lower, ".ndjson") && IsGavel(data) {
		jobs, err := ParseGavelCompressed(file, data, factor)
		return jobs, Gavel, err
	}
	jobs, format, err := Parse(file, data)
	if err != nil {
		return nil, format, err
	}
	jobs, err = Compress(jobs, factor)
	return jobs, format, err
}

// parseArrival reads seconds ("12.5") or a Go duration ("1m30s").
func parseArrival(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, fmt.Errorf("empty; want seconds (12.5) or a duration (1m30s)")
	}
	if d, ok := exactSeconds(t); ok {
		if d > MaxArrival {
			return 0, fmt.Errorf("%q; want seconds from 0 to %g", s, MaxArrival.Seconds())
		}
		return d, nil
	}
	var d time.Duration
	if v, err := strconv.ParseFloat(t, 64); err == nil {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v > MaxArrival.Seconds() {
			return 0, fmt.Errorf("%q; want seconds from 0 to %g", s, MaxArrival.Seconds())
		}
		d = time.Duration(math.Round(v * 1e9))
	} else {
		var err error
		d, err = time.ParseDuration(t)
		if err != nil {
			return 0, fmt.Errorf("%q; want seconds (12.5) or a duration (1m30s)", s)
		}
		if d < 0 || d > MaxArrival {
			return 0, fmt.Errorf("%q; want a duration from 0 to %v", s, MaxArrival)
		}
	}
	return d, nil
}

func parseCount(s, what string, lo, hi int) (int, error) {
	t := strings.TrimSpace(s)
	v, err := strconv.Atoi(t)
	if err != nil {
		if f, ferr := strconv.ParseFloat(t, 64); ferr == nil && f == math.Trunc(f) && math.Abs(f) < 1e15 {
			v, err = int(f), nil
		}
	}
	if err != nil {
		return 0, fmt.Errorf("%q; want a whole number of %s", s, what)
	}
	if v < lo || v > hi {
		return 0, fmt.Errorf("%d; want %d to %d %s", v, lo, hi, what)
	}
	return v, nil
}

func parseModel(s string) (string, error) {
	p, ok := models.Lookup(s)
	if !ok {
		return "", models.UnknownError(s)
	}
	return p.Name, nil
}

// MaxProblems is how many problems of a trace Parse reports (each with its
// file, line and field) before it only counts the rest.
const MaxProblems = problems.Max

// check finishes a parsed trace: every problem found, or the jobs in
// arrival order.
func check(file string, jobs []Job, p *problems.List) ([]Job, error) {
	if err := p.Err(); err != nil {
		return nil, err
	}
	if len(jobs) == 0 {
		return nil, errorf(file, 1, "", "no jobs: the file holds no job line")
	}
	slices.SortStableFunc(jobs, func(a, b Job) int {
		switch {
		case a.Arrival < b.Arrival:
			return -1
		case a.Arrival > b.Arrival:
			return 1
		}
		return 0
	})
	return jobs, nil
}

// uniqueID records id at line and reports a duplicate.
func uniqueID(file string, ids map[int]int, id, line int, field string) error {
	if prev, ok := ids[id]; ok {
		return errorf(file, line, field, "job id %d is used twice (first on line %d)", id, prev)
	}
	ids[id] = line
	return nil
}

// exactSeconds parses a plain decimal number of seconds with at most nine
// fractional digits ("12", "0.000000001") exactly.
func exactSeconds(t string) (time.Duration, bool) {
	whole, frac, _ := strings.Cut(t, ".")
	if whole == "" || len(whole) > 11 || len(frac) > 9 {
		return 0, false
	}
	for _, r := range whole + frac {
		if r < '0' || r > '9' {
			return 0, false
		}
	}
	w, _ := strconv.ParseInt(whole, 10, 64)
	var ns int64
	if frac != "" {
		ns, _ = strconv.ParseInt(frac+strings.Repeat("0", 9-len(frac)), 10, 64)
	}
	return time.Duration(w)*time.Second + time.Duration(ns), true
}

// Compress shortens a trace in time by a factor: arrivals and iterations
// are divided by it (iterations rounded, at least one), so that every job
// arrives and, on its own, computes in 1/factor of the time, and the
// trace's load (the overlap of its jobs) stays the same. A factor of 1
// changes nothing.
func Compress(jobs []Job, factor float64) ([]Job, error) {
	if !(factor >= 1) || math.IsInf(factor, 0) {
		return nil, fmt.Errorf("time compression %v: want a factor of 1 or more", factor)
	}
	out := slices.Clone(jobs)
	if factor == 1 {
		return out, nil
	}
	for i := range out {
		out[i].Arrival = time.Duration(math.Round(float64(out[i].Arrival) / factor))
		out[i].Iterations = max(1, int(math.Round(float64(out[i].Iterations)/factor)))
	}
	return out, nil
}

// ConvertComment is the comment 'tracebed trace convert' writes at the top
// of a converted trace: where it came from and how it was compressed.
func ConvertComment(source string, from Format, factor float64) string {
	c := fmt.Sprintf("Converted by 'tracebed trace convert' from %s (%s format).", source, from)
	if factor != 1 {
		c += fmt.Sprintf("\nCompressed in time by %g: arrivals and iterations are 1/%g of the original's.", factor, factor)
	}
	return c
}

// FormatArrival writes an arrival as seconds, exactly (nanosecond
// precision), so that parsing it gives d back.
func FormatArrival(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	s := strconv.FormatInt(int64(d/time.Second), 10)
	if ns := int64(d % time.Second); ns != 0 {
		s += "." + strings.TrimRight(fmt.Sprintf("%09d", ns), "0")
	}
	return s
}
