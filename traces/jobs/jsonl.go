package jobtrace

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// ParseJSONL reads JSON Lines: one object per line with the keys id
// (optional), arrival (seconds as a number, or a duration string), model,
// workers and iterations. Blank lines and lines starting with '#' or '//'
// are skipped; unknown keys are errors.
func ParseJSONL(file string, data []byte) ([]Job, error) {
	var jobs []Job
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
		j, err := parseJSONLine(file, line, []byte(text), len(jobs))
		if err != nil {
			return nil, err
		}
		if err := uniqueID(file, ids, j.ID, line, "id"); err != nil {
			return nil, err
		}
		jobs = append(jobs, j)
	}
	if err := sc.Err(); err != nil {
		return nil, errorf(file, line+1, "", "%v (lines are limited to 1 MiB)", err)
	}
	return check(file, jobs, ids)
}

func parseJSONLine(file string, line int, b []byte, row int) (Job, error) {
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return Job{}, errorf(file, line, "", "not a JSON object: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Job{}, errorf(file, line, "", "text after the JSON object; want one object per line")
	}
	if raw == nil {
		return Job{}, errorf(file, line, "", "want a JSON object, got null")
	}
	for k := range raw {
		switch k {
		case "id", "arrival", "model", "workers", "iterations":
		default:
			return Job{}, errorf(file, line, k, "unknown key; want id, arrival, model, workers, iterations")
		}
	}
	j := Job{ID: row, Line: line}
	// scalar returns a key's value as text: a JSON string's content or a
	// number's literal.
	scalar := func(key string, required bool) (string, bool, error) {
		v, ok := raw[key]
		if !ok {
			if required {
				return "", false, errorf(file, line, key, "missing")
			}
			return "", false, nil
		}
		var s string
		if err := json.Unmarshal(v, &s); err == nil {
			return s, true, nil
		}
		var n json.Number
		if err := json.Unmarshal(v, &n); err == nil {
			return n.String(), true, nil
		}
		return "", false, errorf(file, line, key, "%s: want a number or a string", v)
	}
	var err error
	if s, ok, e := scalar("id", false); e != nil {
		return Job{}, e
	} else if ok {
		if j.ID, err = parseCount(s, "for the job id", 0, 1<<31-1); err != nil {
			return Job{}, errorf(file, line, "id", "%v", err)
		}
	}
	s, _, e := scalar("arrival", true)
	if e != nil {
		return Job{}, e
	}
	if j.Arrival, err = parseArrival(s); err != nil {
		return Job{}, errorf(file, line, "arrival", "%v", err)
	}
	if s, _, e = scalar("model", true); e != nil {
		return Job{}, e
	}
	if j.Model, err = parseModel(s); err != nil {
		return Job{}, errorf(file, line, "model", "%v", err)
	}
	if s, _, e = scalar("workers", true); e != nil {
		return Job{}, e
	}
	if j.Workers, err = parseCount(s, "workers", 1, MaxWorkers); err != nil {
		return Job{}, errorf(file, line, "workers", "%v", err)
	}
	if s, _, e = scalar("iterations", true); e != nil {
		return Job{}, e
	}
	if j.Iterations, err = parseCount(s, "iterations", 1, MaxIterations); err != nil {
		return Job{}, errorf(file, line, "iterations", "%v", err)
	}
	return j, nil
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
