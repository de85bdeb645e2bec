package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/pflag"

	"github.com/tracebed/tracebed/experiments"
)

// addLimitFlags adds --max-memory and --max-events to f, over l's values.
func addLimitFlags(f *pflag.FlagSet, l *experiments.Limits) {
	f.Var(bytesFlag{&l.Memory}, "max-memory", "refuse a spec whose runs are estimated to need more memory than this, and run in parallel only as many runs as fit in it (e.g. 16GiB)")
	f.Var(eventsFlag{&l.Events}, "max-events", "refuse a spec whose runs are estimated to fire more simulation events than this each (e.g. 5e10)")
}

// eventsFlag is a pflag.Value of a positive count such as 1e10.
type eventsFlag struct{ v *float64 }

func (f eventsFlag) String() string {
	if f.v == nil {
		return ""
	}
	return strconv.FormatFloat(*f.v, 'g', -1, 64)
}
func (f eventsFlag) Type() string { return "count" }
func (f eventsFlag) Set(s string) error {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || !(v > 0) || v > 1e18 {
		return fmt.Errorf("%q: want a positive count such as 1e10", s)
	}
	*f.v = v
	return nil
}

// needSummary describes the largest needs of a spec's runs, for validate.
func needSummary(s *experiments.Spec, needs []experiments.Need) string {
	if len(needs) == 0 {
		return ""
	}
	mem, memAt, events, _ := experiments.Largest(needs)
	out := fmt.Sprintf("; a run needs at most about %s of memory (scenario %s)", experiments.ReadableBytes(mem), s.Scenarios[memAt].Name)
	if events > 0 {
		out += fmt.Sprintf(" and %.2g events", events)
	}
	return out
}

// rehearse runs exp's rehearsal (experiments.Rehearse). When it lasts
// longer than rehearseNotice, one line on stderr (unless quiet) says what
// the wait is for: a spec near a run limit validates in about as long as
// its runs take.
func rehearse(ctx context.Context, stderr io.Writer, quiet bool, name string, exp experiments.Experiment) error {
	if quiet {
		return experiments.Rehearse(ctx, exp)
	}
	said := make(chan struct{})
	t := time.AfterFunc(rehearseNotice, func() {
		defer close(said)
		fmt.Fprintf(stderr, "%s: rehearsing, once each on sim, the runs whose estimates come near the run limit (docs/reliability.md §1)\n", name)
	})
	err := experiments.Rehearse(ctx, exp)
	if !t.Stop() {
		<-said // the line is written before anything that follows
	}
	return err
}

// rehearseNotice is how long a rehearsal runs before rehearse says so.
const rehearseNotice = 2 * time.Second
