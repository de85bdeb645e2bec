package experiments

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/internal/yamlx"
)

// Limits bound what runs may need. The user raises them ('tracebed run'
// and 'tracebed validate' take --max-memory and --max-events); a spec
// whose runs would need more is refused before anything runs, with an
// error naming the field that drives the need (docs/reliability.md).
type Limits struct {
	// Memory bounds the estimated peak memory of the runs under way
	// together: a run estimated above it is refused, and runs execute in
	// parallel only as far as their estimates fit in it.
	Memory units.Bytes
	// Events bounds the simulation events of one run (a run of the sim
	// substrate fires a few million a second).
	Events float64
}

// DefaultLimits are the limits without flags: what a laptop holds, and
// about an hour of simulation per run.
var DefaultLimits = Limits{Memory: 4 * units.GiB, Events: 1e10}

// Need is what each run of one scenario needs at most (over its policies
// and seeds), estimated from the compiled spec alone.
type Need struct {
	// Memory is the peak memory of one run in bytes: its frames, records,
	// queues, state and buffers.
	Memory int64
	// Events is about how many simulation events one run fires (0: the
	// run is not event-driven, or the kind does not say).
	Events float64
	// MemoryBy and EventsBy are the inputs that drive each need most,
	// where the error that refuses it points.
	MemoryBy, EventsBy Cause
}

// Cause is an input that drives a need: a field of the spec, and what of
// it does ("senders × packets × 8 bytes of latencies").
type Cause struct {
	Pos   yamlx.Pos
	Field string
	What  string
}

// EntryCause returns the Cause at key of a scenario or policy entry,
// located as EntryError locates errors.
func EntryCause(s *Spec, e Entry, key, what string) Cause {
	pos, field := EntryWhere(s, e, key)
	return Cause{Pos: pos, Field: field, What: what}
}

// Estimator is implemented by experiments that estimate what their runs
// need (every kind tracebed ships does). Need must be cheap: validate
// calls it for every scenario.
type Estimator interface {
	Need(scenario string) Need
}

// Rehearser is implemented by experiments some of whose runs only running
// can tell will end in time (far memory near its run limit). Rehearse runs
// those once, on sim, and returns an input error, at the field that
// drives it, for each that would not end; it stops when ctx is done.
// validate and run call it after CheckLimits, so that a rehearsal is never
// longer than the runs the limits allow.
type Rehearser interface {
	Rehearse(ctx context.Context) error
}

// Rehearse calls exp's Rehearse, if it has one.
func Rehearse(ctx context.Context, exp Experiment) error {
	if r, ok := exp.(Rehearser); ok {
		return r.Rehearse(ctx)
	}
	return nil
}

// baseMemory is what any run holds besides what its kind estimates: the
// runtime, the compiled spec, the results it builds.
const baseMemory = 16 << 20

// Needs returns each scenario's need, in spec order, or nil when exp does
// not estimate.
func Needs(spec *Spec, exp Experiment) []Need {
	e, ok := exp.(Estimator)
	if !ok {
		return nil
	}
	needs := make([]Need, len(spec.Scenarios))
	for i, sc := range spec.Scenarios {
		needs[i] = e.Need(sc.Name)
		needs[i].Memory += baseMemory
	}
	return needs
}

// CheckLimits refuses a spec whose runs would need more than l: an input
// error for every scenario over a limit, at the field that drives it.
func CheckLimits(spec *Spec, exp Experiment, l Limits) error {
	var errs []error
	for i, n := range Needs(spec, exp) {
		sc := spec.Scenarios[i].Name
		if l.Memory > 0 && n.Memory > int64(l.Memory) {
			errs = append(errs, n.MemoryBy.errorf("a run of scenario %s needs about %s of memory (%s), above --max-memory %s; make it smaller, or raise --max-memory if the machine has the memory", sc, ReadableBytes(n.Memory), n.MemoryBy.What, ReadableBytes(int64(l.Memory))))
		}
		if l.Events > 0 && n.Events > l.Events {
			errs = append(errs, n.EventsBy.errorf("a run of scenario %s fires about %.3g simulation events (%s), above --max-events %.3g, hours of simulation; make it smaller, or raise --max-events", sc, n.Events, n.EventsBy.What, l.Events))
		}
	}
	return errors.Join(errs...)
}

func (c Cause) errorf(format string, args ...any) error {
	return yamlx.Errorf(c.Pos, c.Field, format, args...)
}

// ReadableBytes prints a size with a binary unit and three digits, such as
// "1.5GiB".
func ReadableBytes(b int64) string {
	f := float64(b)
	for _, u := range []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"} {
		if f < 1024 || u == "PiB" {
			s := fmt.Sprintf("%.3g", f)
			if strings.Contains(s, "e") {
				s = fmt.Sprintf("%.0f", f)
			}
			return s + u
		}
		f /= 1024
	}
	return ""
}

// Largest returns the largest memory and event needs of needs, for a
// summary line, and the index of the scenario of each.
func Largest(needs []Need) (mem int64, memAt int, events float64, eventsAt int) {
	for i, n := range needs {
		if n.Memory > mem {
			mem, memAt = n.Memory, i
		}
		if n.Events > events {
			events, eventsAt = n.Events, i
		}
	}
	return mem, memAt, events, eventsAt
}
