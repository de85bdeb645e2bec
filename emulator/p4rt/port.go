package p4rt

import (
	"context"
	"fmt"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"

	"github.com/tracebed/tracebed/emulator"
)

// Port is an agent's control-plane channel: how a controller that runs as
// an agent (a host program over an emulator.Env) talks P4Runtime without
// ever blocking a callback. Its calls go through the Env's
// emulator.Caller: the substrate runs them outside the agent's callbacks —
// on sim against the in-process switch after the modelled control
// latency, on netns over gRPC on a goroutine of their own, each within
// emulator.CallTimeout — and their completions come back as the agent's
// events. They run one at a time in the order they were made, so a write
// planned from a read's answer, or a removal after its installation, find
// the switch as the agent expects, and Then can wait for all of them.
//
// A call touches only what it was given: the Client (safe for concurrent
// use: the gRPC client is, and on sim everything runs on one goroutine)
// and the values it captured; the agent's state is touched in done. A
// Port is used from its agent's callbacks only.
type Port struct {
	caller  emulator.Caller
	pending int
}

// NewPort returns the port of the agent whose environment is env. It fails
// when env cannot make calls (every substrate's Env can; a test's fake Env
// may not).
func NewPort(env emulator.Env) (*Port, error) {
	c, ok := env.(emulator.Caller)
	if !ok {
		return nil, fmt.Errorf("p4rt: the agent's environment %T makes no control-plane calls (emulator.Caller)", env)
	}
	return &Port{caller: c}, nil
}

// Call hands op to the substrate and returns at once; done(op's error)
// runs later on the agent's goroutine, after the completions of every
// earlier call. op may make any number of P4Runtime requests (a read, and
// the write planned from its answer) with ctx.
func (p *Port) Call(op func(ctx context.Context) error, done func(err error)) {
	p.pending++
	p.caller.Call(op, func(err error) {
		p.pending--
		done(err)
	})
}

// Write sends one WriteRequest with updates to c (Client.Write) and calls
// done with its error.
func (p *Port) Write(c Client, updates []*p4v1.Update, done func(err error)) {
	p.Call(func(ctx context.Context) error { return c.Write(ctx, updates...) }, done)
}

// Read reads the entities matching queries from c (Client.Read) and calls
// done with them and the error.
func (p *Port) Read(c Client, queries []*p4v1.Entity, done func(ents []*p4v1.Entity, err error)) {
	var ents []*p4v1.Entity
	p.Call(func(ctx context.Context) (err error) {
		ents, err = c.Read(ctx, queries...)
		return err
	}, func(err error) { done(ents, err) })
}

// Pending returns how many calls were made and have not completed.
func (p *Port) Pending() int { return p.pending }

// Then runs f once every call made so far has completed: at once, inside
// Then, when none is pending; otherwise as an event after the last one's
// completion. It is how an agent acts on what its calls carried out —
// tells a job's workers to send once the switch holds their binding —
// while its other events go on.
func (p *Port) Then(f func()) {
	if p.pending == 0 {
		f()
		return
	}
	p.Call(func(context.Context) error { return nil }, func(error) { f() })
}
