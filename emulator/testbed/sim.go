package testbed

import (
	"context"
	"fmt"
	"time"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/emulator/sim"
	goswitch "github.com/tracebed/tracebed/emulator/switch"
	"github.com/tracebed/tracebed/p4/fwd"
	"github.com/tracebed/tracebed/p4/programs"
	"github.com/tracebed/tracebed/topologies"
)

// Sim is the testbed of the simulation substrate. Everything — agents,
// pipelines, the driver's done function — runs on the caller's goroutine,
// between events.
type Sim struct {
	Sim     *sim.Sim
	Network *sim.Network
	planes  map[string]goswitch.Dataplane
	taps    map[portKey]bool // ports being captured (capture.go)
}

// NewSim builds cfg on a fresh simulation.
func NewSim(cfg Config) (*Sim, error) {
	reg, err := programs.Registry()
	if err != nil {
		return nil, err
	}
	name := cfg.Program
	if name == "" {
		name = "fwd"
	}
	prog := reg.Lookup(name)
	if prog == nil {
		return nil, fmt.Errorf("testbed: no program %q (have %v)", name, reg.Names())
	}
	t := &Sim{Sim: sim.New(), planes: map[string]goswitch.Dataplane{}}
	t.Network, err = sim.NewNetwork(t.Sim, cfg.Topology, sim.Options{Seed: cfg.Seed,
		Pipeline: func(sw *topologies.Node, base *fwd.Pipeline) (emulator.Pipeline, error) {
			dp, err := prog.New(sw, base)
			if err != nil {
				return nil, err
			}
			t.planes[sw.Name] = dp
			return dp, nil
		}})
	if err != nil {
		return nil, err
	}
	return t, nil
}

// Substrate implements Testbed.
func (t *Sim) Substrate() string { return "sim" }

// Topology implements Testbed.
func (t *Sim) Topology() *topologies.Topology { return t.Network.Topology }

// Switch implements Testbed: an in-process P4Runtime client.
func (t *Sim) Switch(name string) (p4rt.Client, error) {
	dp := t.planes[name]
	if dp == nil {
		return nil, fmt.Errorf("testbed: no switch %q", name)
	}
	return p4rt.Local(dp), nil
}

// Dataplane returns the pipeline of the named switch, for tests that
// inspect its registers directly.
func (t *Sim) Dataplane(name string) goswitch.Dataplane { return t.planes[name] }

// Attach implements Testbed.
func (t *Sim) Attach(host string, udpPort uint16, agent emulator.Agent) (emulator.Env, error) {
	return t.Network.Attach(host, udpPort, agent)
}

// Inspect implements Testbed: on sim, f runs at once.
func (t *Sim) Inspect(_ emulator.Env, f func()) { f() }

// Now implements Testbed.
func (t *Sim) Now() time.Duration { return t.Sim.Now().Duration() }

// Run implements Testbed.
func (t *Sim) Run(ctx context.Context, step, limit time.Duration, done func() bool) error {
	st, end := sim.FromDuration(max(step, time.Nanosecond)), sim.FromDuration(limit)
	// A cancelled ctx stops the event loop within a few thousand events,
	// even inside one step.
	defer t.Sim.InterruptOn(ctx)()
	for !done() {
		if err := ctx.Err(); err != nil {
			return err
		}
		if t.Sim.Pending() == 0 {
			return fmt.Errorf("%w (at %v)", ErrStalled, t.Sim.Now())
		}
		if t.Sim.Now() >= end {
			return fmt.Errorf("%w (%v)", ErrLimit, limit)
		}
		t.Sim.RunUntil(min(t.Sim.Now()+st, end))
	}
	return nil
}

// Close implements Testbed; a simulation holds no outside resources.
func (t *Sim) Close() error { return nil }
