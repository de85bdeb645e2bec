package jobtrace

import (
	"errors"
	"io"
	"slices"
	"strings"
)

// tiresiasColumns are the columns of the Tiresias simulator's job traces
// (SymbioticLab/Tiresias, simulator/*.csv).
var tiresiasColumns = []string{"job_id", "num_gpu", "submit_time", "iterations", "model_name", "duration", "interval"}

// IsTiresias reports whether data starts with a Tiresias trace header (it
// names at least num_gpu, submit_time and model_name).
func IsTiresias(data []byte) bool {
	r := newCSVReader(data)
	h, err := r.Read()
	if err != nil {
		return false
	}
	for i := range h {
		h[i] = strings.ToLower(strings.TrimSpace(h[i]))
	}
	return slices.Contains(h, "num_gpu") && slices.Contains(h, "submit_time") && slices.Contains(h, "model_name")
}

// ParseTiresias imports a Tiresias trace: job_id becomes the id, num_gpu the
// number of workers (one GPU per worker host), submit_time (seconds) the
// arrival, model_name the model and iterations the iterations. The
// trace's duration and interval columns are checked to be numbers and then
// ignored: the testbed computes durations from the model profiles and the
// network.
func ParseTiresias(file string, data []byte) ([]Job, error) {
	r := newCSVReader(data)
	header, err := r.Read()
	if err != nil {
		return nil, csvError(file, r, err, "header")
	}
	col := map[string]int{}
	for i, h := range header {
		name := strings.ToLower(strings.TrimSpace(h))
		if _, dup := col[name]; dup {
			line, _ := r.FieldPos(i)
			return nil, errorf(file, line, "header", "column %q appears twice", name)
		}
		col[name] = i
	}
	for _, need := range []string{"job_id", "num_gpu", "submit_time", "iterations", "model_name"} {
		if _, ok := col[need]; !ok {
			line, _ := r.FieldPos(0)
			return nil, errorf(file, line, "header", "no %q column; a Tiresias trace has %s", need, strings.Join(tiresiasColumns, ", "))
		}
	}
	var jobs []Job
	ids := map[int]int{}
	for {
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
		get := func(name string) (string, int) {
			i := col[name]
			l, _ := r.FieldPos(i)
			return rec[i], l
		}
		var j Job
		j.Line = line
		s, l := get("job_id")
		if j.ID, err = parseCount(s, "for the job id", 0, 1<<31-1); err != nil {
			return nil, errorf(file, l, "job_id", "%v", err)
		}
		s, l = get("num_gpu")
		if j.Workers, err = parseCount(s, "GPUs", 1, MaxWorkers); err != nil {
			return nil, errorf(file, l, "num_gpu", "%v", err)
		}
		s, l = get("submit_time")
		if j.Arrival, err = parseArrival(s); err != nil {
			return nil, errorf(file, l, "submit_time", "%v", err)
		}
		s, l = get("iterations")
		if j.Iterations, err = parseCount(s, "iterations", 1, MaxIterations); err != nil {
			return nil, errorf(file, l, "iterations", "%v", err)
		}
		s, l = get("model_name")
		if j.Model, err = parseModel(s); err != nil {
			return nil, errorf(file, l, "model_name", "%v", err)
		}
		for _, opt := range []string{"duration", "interval"} {
			if _, ok := col[opt]; ok {
				s, l := get(opt)
				if _, err := parseArrival(s); err != nil {
					return nil, errorf(file, l, opt, "%v", err)
				}
			}
		}
		if err := uniqueID(file, ids, j.ID, line, "job_id"); err != nil {
			return nil, err
		}
		jobs = append(jobs, j)
	}
	return check(file, jobs, ids)
}
