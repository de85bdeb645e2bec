package jobtrace

import (
	"slices"
	"strings"

	"github.com/tracebed/tracebed/internal/problems"
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
	t, err := readTable(file, data, nil, []string{"job_id", "num_gpu", "submit_time", "iterations", "model_name"},
		"a Tiresias trace has "+strings.Join(tiresiasColumns, ", "))
	if err != nil {
		return nil, err
	}
	var jobs []Job
	var probs problems.List
	ids := map[int]int{}
	for {
		ok, err := t.next()
		if err != nil {
			probs.Add(err)
			continue
		}
		if !ok {
			break
		}
		j := Job{Line: t.line}
		fields := []columnParser{
			{"job_id", func(s string) (err error) { j.ID, err = parseCount(s, "for the job id", 0, 1<<31-1); return }},
			{"num_gpu", func(s string) (err error) { j.Workers, err = parseCount(s, "GPUs", 1, MaxWorkers); return }},
			{"submit_time", func(s string) (err error) { j.Arrival, err = parseArrival(s); return }},
			{"iterations", func(s string) (err error) { j.Iterations, err = parseCount(s, "iterations", 1, MaxIterations); return }},
			{"model_name", func(s string) (err error) { j.Model, err = parseModel(s); return }},
		}
		for _, opt := range []string{"duration", "interval"} { // checked, then ignored
			if t.has(opt) {
				fields = append(fields, columnParser{opt, func(s string) error { _, err := parseArrival(s); return err }})
			}
		}
		if !t.parseAll(fields, &probs) {
			continue
		}
		if err := uniqueID(file, ids, j.ID, t.line, "job_id"); err != nil {
			probs.Add(err)
			continue
		}
		jobs = append(jobs, j)
	}
	return check(file, jobs, &probs)
}
