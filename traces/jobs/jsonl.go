package jobtrace

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/tracebed/tracebed/internal/problems"
)

// ParseJSONL reads JSON Lines: one object per line with the keys id
// (optional), arrival (seconds as a number, or a duration string), model,
// workers and iterations. Blank lines and lines starting with '#' or '//'
// are skipped; unknown keys, and a key given twice in an object, are
// errors.
func ParseJSONL(file string, data []byte) ([]Job, error) {
	var jobs []Job
	var probs problems.List
	ids := map[int]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") || strings.HasPrefix(text, "//") {
			continue
		}
		j, ok := parseJSONLine(file, line, []byte(text), len(jobs), &probs)
		if !ok {
			continue
		}
		if err := uniqueID(file, ids, j.ID, line, "id"); err != nil {
			probs.Add(err)
			continue
		}
		jobs = append(jobs, j)
	}
	if err := sc.Err(); err != nil {
		probs.Add(errorf(file, line+1, "", "%v (lines are limited to 1 MiB)", err))
	}
	return check(file, jobs, &probs)
}

// parseJSONLine reads one object, recording every problem of the line in
// p; it reports whether the line is a job.
func parseJSONLine(file string, line int, b []byte, row int, p *problems.List) (Job, bool) {
	raw, err := objectFields(b)
	if err != nil {
		p.Add(errorf(file, line, "", "%v", err))
		return Job{}, false
	}
	ok := true
	for _, k := range slices.Sorted(maps.Keys(raw.dups)) {
		p.Add(errorf(file, line, k, "given %d times; give each key once", raw.dups[k]+1))
		ok = false
	}
	for _, k := range slices.Sorted(maps.Keys(raw.values)) {
		switch k {
		case "id", "arrival", "model", "workers", "iterations":
		default:
			p.Add(errorf(file, line, k, "unknown key; want id, arrival, model, workers, iterations"))
			ok = false
		}
	}
	if !ok {
		return Job{}, false
	}
	return parseJSONFields(file, line, raw.values, row, p)
}

// jsonObject is a JSON object's fields, and the keys it repeats (with how
// many extra times).
type jsonObject struct {
	values map[string]json.RawMessage
	dups   map[string]int
}

// objectFields reads one JSON object and nothing after it, keeping every
// key's raw value and noting repeated keys, which encoding/json would
// silently resolve to the last.
func objectFields(b []byte) (jsonObject, error) {
	o := jsonObject{values: map[string]json.RawMessage{}}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return o, fmt.Errorf("not a JSON object: %v", err)
	}
	if tok == nil {
		return o, errors.New("want a JSON object, got null")
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return o, fmt.Errorf("not a JSON object: starts with %v", tok)
	}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return o, fmt.Errorf("not a JSON object: %v", err)
		}
		k, _ := kt.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return o, fmt.Errorf("not a JSON object: %v", err)
		}
		if _, seen := o.values[k]; seen {
			if o.dups == nil {
				o.dups = map[string]int{}
			}
			o.dups[k]++
		}
		o.values[k] = v
	}
	if _, err := dec.Token(); err != nil {
		return o, fmt.Errorf("not a JSON object: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return o, errors.New("text after the JSON object; want one object per line")
	}
	return o, nil
}

// parseJSONFields reads a job from an object's fields, recording each bad
// field in p; it reports whether all were good.
func parseJSONFields(file string, line int, raw map[string]json.RawMessage, row int, p *problems.List) (Job, bool) {
	j := Job{ID: row, Line: line}
	ok := true
	bad := func(err error) {
		p.Add(err)
		ok = false
	}
	// scalar returns a key's value as text: a JSON string's content or a
	// number's literal.
	scalar := func(key string, required bool) (string, bool) {
		v, ok := raw[key]
		if !ok {
			if required {
				bad(errorf(file, line, key, "missing"))
			}
			return "", false
		}
		var s string
		if err := json.Unmarshal(v, &s); err == nil {
			return s, true
		}
		var n json.Number
		if err := json.Unmarshal(v, &n); err == nil {
			return n.String(), true
		}
		bad(errorf(file, line, key, "%s: want a number or a string", v))
		return "", false
	}
	field := func(key string, required bool, parse func(string) error) {
		if s, ok := scalar(key, required); ok {
			if err := parse(s); err != nil {
				bad(errorf(file, line, key, "%v", err))
			}
		}
	}
	field("id", false, func(s string) (err error) { j.ID, err = parseCount(s, "for the job id", 0, 1<<31-1); return })
	field("arrival", true, func(s string) (err error) { j.Arrival, err = parseArrival(s); return })
	field("model", true, func(s string) (err error) { j.Model, err = parseModel(s); return })
	field("workers", true, func(s string) (err error) { j.Workers, err = parseCount(s, "workers", 1, MaxWorkers); return })
	field("iterations", true, func(s string) (err error) { j.Iterations, err = parseCount(s, "iterations", 1, MaxIterations); return })
	return j, ok
}

// WriteJSONL writes jobs as JSON Lines.
func WriteJSONL(w io.Writer, jobs []Job) error {
	for _, j := range jobs {
		if _, err := fmt.Fprintf(w, "{\"id\": %d, \"arrival\": %s, \"model\": %q, \"workers\": %d, \"iterations\": %d}\n",
			j.ID, FormatArrival(j.Arrival), j.Model, j.Workers, j.Iterations); err != nil {
			return err
		}
	}
	return nil
}
