// Package testbed is what experiments run on: a topology brought up on a
// substrate, with a data plane loaded in every switch, ready for agents and
// controllers. The same experiment code runs on the deterministic
// simulation (NewSim) and on real network namespaces (package
// emulator/testbed/netnstb); only the constructor differs.
//
// The rules that make one experiment run unchanged on both:
//
//   - Agents talk to the world only through their emulator.Env.
//   - Controllers program switches only through the p4rt.Client of Switch:
//     P4Runtime messages, by name.
//   - The driver reads an agent's state only inside Inspect (or after
//     Close): on netns, agents run concurrently on their own loops.
//   - The driver waits with Run, which checks its done function between
//     steps of testbed time.
package testbed

import (
	"context"
	"errors"
	"time"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/dataplane"
	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/topologies"
)

// Testbed is a running network.
type Testbed interface {
	// Substrate is "sim" or "netns".
	Substrate() string
	// Topology is the network the testbed runs.
	Topology() *topologies.Topology
	// Switch returns the P4Runtime client of the named switch. The switch
	// runs Config.Program, freshly loaded.
	Switch(name string) (p4rt.Client, error)
	// Attach binds agent to udpPort on the named host and starts it.
	Attach(host string, udpPort uint16, agent emulator.Agent) (emulator.Env, error)
	// Inspect runs f where it may read the state of env's agent, and
	// returns once f has run.
	Inspect(env emulator.Env, f func())
	// Now returns the testbed's clock: virtual on sim, wall on netns.
	Now() time.Duration
	// Run lets the testbed run until done reports true. done is called
	// between steps of testbed time (from the driver's goroutine; it may
	// call Inspect). Run fails when ctx ends, when limit of testbed time
	// passes, or (sim) when nothing is left to happen and done is false.
	Run(ctx context.Context, step, limit time.Duration, done func() bool) error
	// Close stops every agent and switch and removes what the testbed
	// created. Afterwards the agents' state may be read directly.
	Close() error
}

// Config describes the testbed to build.
type Config struct {
	Topology *topologies.Topology
	// Program is the data plane every switch runs (one of p4/'s
	// programs: the experiment that builds the testbed knows which it
	// needs). It is required when the topology has switches.
	Program *dataplane.Program
	// Seed seeds every random source: agents', links' impairments.
	Seed uint64
	// ControlLatency is, on sim, the modelled time of a control-plane
	// call an agent makes (emulator.Caller: a P4Runtime round trip to a
	// switch, through a p4rt.Port): the call runs against the in-process
	// switch, and its completion reaches the agent, this long after it
	// was made; 0 runs both at the instant of the call, after the events
	// already due. netns has the real latency and ignores it.
	ControlLatency time.Duration
}

// ErrStalled is returned by Run on sim when no event is left and done is
// still false: the experiment waits for something that cannot happen.
var ErrStalled = errors.New("testbed: nothing left to happen, and the run is not done")

// ErrLimit is returned by Run when the time limit passes first.
var ErrLimit = errors.New("testbed: time limit reached before the run was done")
