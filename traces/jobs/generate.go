package jobtrace

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/tracebed/tracebed/traces/models"
)

// Choice is one option of a weighted random choice.
type Choice[T any] struct {
	Value  T
	Weight float64
}

// GenParams describe a synthetic trace.
type GenParams struct {
	Jobs int
	// MeanInterarrival is the mean gap between arrivals: arrivals form a
	// Poisson process (exponential gaps), the first job arriving at 0.
	MeanInterarrival time.Duration
	// Models is the model mix.
	Models []Choice[string]
	// Workers is the distribution of workers per job.
	Workers []Choice[int]
	// GPUTime bounds each job's total compute time (iterations × compute
	// time per iteration on the reference GPU): drawn log-uniformly from
	// [GPUTime[0], GPUTime[1]], then rounded to whole iterations (at
	// least one).
	GPUTime [2]time.Duration
	Seed    uint64
}

// Mixes are the named model mixes: every model of a family with equal
// weight, or all of them.
var Mixes = []string{"vision", "language", "mixed"}

// Mix returns the named model mix.
func Mix(name string) ([]Choice[string], error) {
	var ps []models.Profile
	switch name {
	case "vision":
		ps = models.OfFamily(models.Vision)
	case "language":
		ps = models.OfFamily(models.Language)
	case "mixed":
		ps = models.All()
	default:
		return nil, fmt.Errorf("unknown mix %q; want one of %s, or a mapping of model names to weights", name, strings.Join(Mixes, ", "))
	}
	out := make([]Choice[string], len(ps))
	for i, p := range ps {
		out[i] = Choice[string]{p.Name, 1}
	}
	return out, nil
}

// Check reports the first problem with p, naming the parameter.
func (p GenParams) Check() error {
	switch {
	case p.Jobs < 1 || p.Jobs > 1_000_000:
		return fieldErrorf("jobs", "%d; want 1 to 1000000", p.Jobs)
	case p.MeanInterarrival < 0:
		return fieldErrorf("interarrival", "%v is negative", p.MeanInterarrival)
	case p.GPUTime[0] <= 0 || p.GPUTime[1] < p.GPUTime[0]:
		return fieldErrorf("gpu_time", "[%v, %v]; want 0 < min <= max", p.GPUTime[0], p.GPUTime[1])
	}
	if err := checkChoices(p.Models, "models", func(m string) error {
		if _, ok := models.Lookup(m); !ok {
			return models.UnknownError(m)
		}
		return nil
	}); err != nil {
		return err
	}
	return checkChoices(p.Workers, "workers", func(w int) error {
		if w < 1 || w > MaxWorkers {
			return fmt.Errorf("%d workers; want 1 to %d", w, MaxWorkers)
		}
		return nil
	})
}

// FieldError is an invalid generator parameter: Field is its yaml key.
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Err.Error() }

func (e *FieldError) Unwrap() error { return e.Err }

func fieldErrorf(field, format string, args ...any) error {
	return &FieldError{Field: field, Err: fmt.Errorf(format, args...)}
}

func checkChoices[T any](cs []Choice[T], what string, ok func(T) error) error {
	if len(cs) == 0 {
		return fieldErrorf(what, "empty; give at least one choice")
	}
	var sum float64
	for _, c := range cs {
		if err := ok(c.Value); err != nil {
			return fieldErrorf(what, "%v", err)
		}
		if c.Weight < 0 || math.IsNaN(c.Weight) || math.IsInf(c.Weight, 0) {
			return fieldErrorf(what, "weight %v of %v; want a finite weight >= 0", c.Weight, c.Value)
		}
		sum += c.Weight
	}
	switch {
	case sum <= 0:
		return fieldErrorf(what, "the weights sum to zero")
	case math.IsInf(sum, 0):
		// Every draw would pick the last choice.
		return fieldErrorf(what, "the weights sum beyond the largest number (%v); want smaller weights (only their ratios matter)", math.MaxFloat64)
	}
	return nil
}

func pick[T any](r *rand.Rand, cs []Choice[T]) T {
	var sum float64
	for _, c := range cs {
		sum += c.Weight
	}
	x := r.Float64() * sum
	for _, c := range cs {
		if x < c.Weight {
			return c.Value
		}
		x -= c.Weight
	}
	for k := len(cs) - 1; k >= 0; k-- {
		if cs[k].Weight > 0 {
			return cs[k].Value
		}
	}
	return cs[len(cs)-1].Value
}

// Generate draws a synthetic trace. The same parameters and seed give the
// same trace.
func Generate(p GenParams) ([]Job, error) {
	if err := p.Check(); err != nil {
		return nil, err
	}
	r := rand.New(rand.NewPCG(p.Seed, 0x6a6f6274726163)) // "jobtrac"
	jobs := make([]Job, p.Jobs)
	var t float64 // seconds
	lo, hi := p.GPUTime[0].Seconds(), p.GPUTime[1].Seconds()
	for i := range jobs {
		if i > 0 && p.MeanInterarrival > 0 {
			t += r.ExpFloat64() * p.MeanInterarrival.Seconds()
		}
		model := pick(r, p.Models)
		prof, _ := models.Lookup(model)
		gpu := lo * math.Exp(r.Float64()*math.Log(hi/lo))
		iters := max(1, int(math.Round(gpu/prof.Compute.Seconds())))
		jobs[i] = Job{
			ID:         i,
			Arrival:    min(time.Duration(math.Round(t*1e9)), MaxArrival),
			Model:      prof.Name,
			Workers:    pick(r, p.Workers),
			Iterations: min(iters, MaxIterations),
		}
	}
	return jobs, nil
}
