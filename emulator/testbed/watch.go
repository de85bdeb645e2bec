package testbed

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/p4rt"
)

// Watched is a testbed whose agents are watched for the one thing they
// must never do: block a callback on a control-plane round trip (the rule
// of emulator.Caller). Agents attached to it, and the P4Runtime clients it
// hands out (Switch), are wrapped:
//
//   - every Write or Read of a client is counted and, on sim, where every
//     callback runs on one goroutine, one made while an agent's callback
//     runs — Start, Recv, a timer, a posted function, a call's completion
//     — is recorded with the agent's address: a deterministic check;
//   - each request takes Delay longer (a slow switch), and the lateness of
//     every agent timer is recorded: on netns an agent that blocked on a
//     slow switch fires its timers about Delay late, one that hands its
//     calls to its substrate fires them on time.
//
// It exists for tests of agents that program switches; nothing else
// changes.
type Watched struct {
	Testbed
	// Delay is added to every request of the clients Switch returns.
	Delay time.Duration

	sim     bool
	depth   atomic.Int64 // callbacks running (meaningful on sim only)
	current string       // the agent of the callback running (sim only)

	mu       sync.Mutex
	inside   []string
	calls    int
	timers   int
	lateness time.Duration
}

// Watch wraps tb; delay is Watched.Delay.
func Watch(tb Testbed, delay time.Duration) *Watched {
	return &Watched{Testbed: tb, Delay: delay, sim: tb.Substrate() == "sim"}
}

// WatchReport is what a Watched testbed saw.
type WatchReport struct {
	// Calls counts the P4Runtime requests (Write and Read) of the
	// testbed's clients; Inside describes those made inside an agent's
	// callback (sim only).
	Calls  int
	Inside []string
	// Timers counts the agents' timers that fired; MaxLateness is the
	// longest any fired after its time.
	Timers      int
	MaxLateness time.Duration
}

// Report returns what the testbed saw so far.
func (w *Watched) Report() WatchReport {
	w.mu.Lock()
	defer w.mu.Unlock()
	return WatchReport{Calls: w.calls, Inside: append([]string(nil), w.inside...), Timers: w.timers, MaxLateness: w.lateness}
}

// Switch implements Testbed: the switch's client, watched.
func (w *Watched) Switch(name string) (p4rt.Client, error) {
	c, err := w.Testbed.Switch(name)
	if err != nil {
		return nil, err
	}
	return &watchedClient{Client: c, w: w, name: name}, nil
}

// Attach implements Testbed: the agent runs watched. The Env returned is
// the testbed's own (for Inspect); the agent sees a watched one.
func (w *Watched) Attach(host string, udpPort uint16, agent emulator.Agent) (emulator.Env, error) {
	return w.Testbed.Attach(host, udpPort, &watchedAgent{w: w, agent: agent})
}

// in runs f as a callback of agent a.
func (w *Watched) in(a *watchedAgent, f func()) {
	w.depth.Add(1)
	defer w.depth.Add(-1)
	if w.sim {
		prev := w.current
		w.current = a.addr
		defer func() { w.current = prev }()
	}
	f()
}

// request counts a client request and records one made inside a callback.
func (w *Watched) request(what string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls++
	if w.sim && w.depth.Load() > 0 {
		w.inside = append(w.inside, fmt.Sprintf("%s inside a callback of the agent on %s", what, w.current))
	}
}

// wait is the slow switch's extra time.
func (w *Watched) wait(ctx context.Context) error {
	if w.Delay <= 0 {
		return nil
	}
	t := time.NewTimer(w.Delay)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

type watchedAgent struct {
	w     *Watched
	agent emulator.Agent
	addr  string
}

func (a *watchedAgent) Start(env emulator.Env) {
	a.addr = env.Local().String()
	a.w.in(a, func() { a.agent.Start(&watchedEnv{Env: env, w: a.w, a: a}) })
}

func (a *watchedAgent) Recv(from emulator.Addr, b []byte) {
	a.w.in(a, func() { a.agent.Recv(from, b) })
}

// watchedEnv is what a watched agent sees: its Env, with every function it
// hands back to the substrate run as a callback.
type watchedEnv struct {
	emulator.Env
	w *Watched
	a *watchedAgent
}

func (e *watchedEnv) After(d time.Duration, f func()) emulator.Timer {
	due := e.Now() + max(d, 0)
	return e.Env.After(d, func() {
		late := e.Now() - due
		e.w.mu.Lock()
		e.w.timers++
		e.w.lateness = max(e.w.lateness, late)
		e.w.mu.Unlock()
		e.w.in(e.a, f)
	})
}

// Post implements emulator.Poster when the Env does.
func (e *watchedEnv) Post(f func()) bool {
	p, ok := e.Env.(emulator.Poster)
	if !ok {
		return false
	}
	return p.Post(func() { e.w.in(e.a, f) })
}

// Call implements emulator.Caller: op runs outside the callbacks, done is
// one.
func (e *watchedEnv) Call(op func(ctx context.Context) error, done func(err error)) {
	e.Env.(emulator.Caller).Call(op, func(err error) { e.w.in(e.a, func() { done(err) }) })
}

type watchedClient struct {
	p4rt.Client
	w    *Watched
	name string
}

func (c *watchedClient) Write(ctx context.Context, updates ...*p4v1.Update) error {
	c.w.request(fmt.Sprintf("write of %d updates to %s", len(updates), c.name))
	if err := c.w.wait(ctx); err != nil {
		return err
	}
	return c.Client.Write(ctx, updates...)
}

func (c *watchedClient) Read(ctx context.Context, queries ...*p4v1.Entity) ([]*p4v1.Entity, error) {
	c.w.request(fmt.Sprintf("read of %d queries from %s", len(queries), c.name))
	if err := c.w.wait(ctx); err != nil {
		return nil, err
	}
	return c.Client.Read(ctx, queries...)
}

var (
	_ emulator.Poster = (*watchedEnv)(nil)
	_ emulator.Caller = (*watchedEnv)(nil)
)
