package testbed

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/dataplane"
	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/emulator/sim"
	"github.com/tracebed/tracebed/topologies"
)

// Sim is the testbed of the simulation substrate. Everything — agents,
// pipelines, the driver's done function — runs on the caller's goroutine,
// between events.
type Sim struct {
	Sim     *sim.Sim
	Network *sim.Network
	planes  map[string]dataplane.Dataplane
	taps    map[portKey]bool // ports being captured (capture.go)
}

// NewSim builds cfg on a fresh simulation.
func NewSim(cfg Config) (*Sim, error) {
	prog := cfg.Program
	if prog == nil && len(cfg.Topology.Switches()) > 0 {
		return nil, errors.New("testbed: Config.Program is nil: the switches need a data plane")
	}
	if cfg.ControlLatency < 0 {
		return nil, fmt.Errorf("testbed: control latency %v is negative", cfg.ControlLatency)
	}
	t := &Sim{Sim: sim.New(), planes: map[string]dataplane.Dataplane{}}
	var err error
	t.Network, err = sim.NewNetwork(t.Sim, cfg.Topology, sim.Options{Seed: cfg.Seed, ControlLatency: cfg.ControlLatency,
		Pipeline: func(sw *topologies.Node, routes topologies.RouteTable) (emulator.Pipeline, error) {
			dp, err := prog.New(sw, routes)
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
func (t *Sim) Dataplane(name string) dataplane.Dataplane { return t.planes[name] }

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
