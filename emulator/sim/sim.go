// Package sim is tracebed's deterministic discrete-event substrate.
//
// Time is virtual, in integer picoseconds, so that serializing a 256-byte
// frame at 100 Gbps (20.48 ns) is exact. Events fire in time order; events
// at the same instant fire in the order they were scheduled, so a run is a
// pure function of its inputs and seed. Everything runs on the goroutine
// that calls Run: agents, pipelines and timers need no locks.
//
// On top of the event core, Network (network.go) models a topology: links
// that serialize at their rate, propagate with their delay and drop at their
// buffer limit, switches that run a Pipeline over strict-priority egress
// queues, and hosts whose agents see an emulator.Env.
package sim

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// Time is virtual time in picoseconds since the start of the run.
type Time int64

// Units of Time.
const (
	Picosecond  Time = 1
	Nanosecond       = 1000 * Picosecond
	Microsecond      = 1000 * Nanosecond
	Millisecond      = 1000 * Microsecond
	Second           = 1000 * Millisecond
	Forever          = Time(1<<63 - 1)
)

// FromDuration converts a time.Duration (nanoseconds) to Time.
func FromDuration(d time.Duration) Time { return Time(d) * Nanosecond }

// Duration converts t to a time.Duration, truncating below a nanosecond.
func (t Time) Duration() time.Duration { return time.Duration(t / Nanosecond) }

// Seconds returns t in seconds.
func (t Time) Seconds() float64 { return float64(t) / float64(Second) }

func (t Time) String() string {
	if t%Nanosecond == 0 {
		return t.Duration().String()
	}
	return fmt.Sprintf("%s+%dps", t.Duration(), t%Nanosecond)
}

// handler is what an event does when it fires. The network's ports and
// timers implement it, so the hot path allocates no closures.
type handler interface {
	fire(s *Sim, p *Packet)
}

// arity is the number of children of a node of the event heap: a 4-ary heap
// is shallower than a binary one and touches fewer cache lines per pop.
const arity = 4

// event is one entry of the event heap.
type event struct {
	at  Time
	seq uint64
	h   handler
	p   *Packet
}

func (e *event) before(o *event) bool {
	return e.at < o.at || (e.at == o.at && e.seq < o.seq)
}

// Sim is the event core. The zero value is not usable; call New.
type Sim struct {
	now     Time
	seq     uint64
	heap    []event
	stopped bool
	fired   uint64
	// interrupted is set from any goroutine (Interrupt); the event loop
	// reads it every checkEvery events.
	interrupted atomic.Bool
}

// checkEvery is how many events the loop fires between two looks at the
// interrupt flag: a few microseconds of work, so an interrupted run stops
// at once, and an atomic load too rare to cost anything.
const checkEvery = 4096

// New returns an empty simulation at time zero.
func New() *Sim { return &Sim{heap: make([]event, 0, 1024)} }

// Now returns the current virtual time.
func (s *Sim) Now() Time { return s.now }

// Fired returns the number of events that have fired so far.
func (s *Sim) Fired() uint64 { return s.fired }

// Pending returns the number of scheduled events, including stopped timers
// that have not reached their time yet.
func (s *Sim) Pending() int { return len(s.heap) }

// funcHandler runs a plain function.
type funcHandler func()

func (f funcHandler) fire(*Sim, *Packet) { f() }

// At schedules f at time t; a time in the past means now.
func (s *Sim) At(t Time, f func()) { s.schedule(t, funcHandler(f), nil) }

// After schedules f after d and returns a Timer that can cancel it.
func (s *Sim) After(d Time, f func()) *Timer {
	t := &Timer{fn: f}
	s.schedule(s.now+max(d, 0), t, nil)
	return t
}

func (s *Sim) schedule(at Time, h handler, p *Packet) {
	if at < s.now {
		at = s.now
	}
	s.seq++
	s.push(event{at: at, seq: s.seq, h: h, p: p})
}

// push adds an event whose sequence number was already drawn.
func (s *Sim) push(e event) {
	s.heap = append(s.heap, e)
	s.up(len(s.heap) - 1)
}

// Stop makes Run return after the current event.
func (s *Sim) Stop() { s.stopped = true }

// Interrupt makes Run and RunUntil return within checkEvery events, now and
// ever after, without setting the clock to their limit. Unlike Stop it may
// be called from any goroutine: it is how a run that is told to stop
// (SIGINT, a deadline) ends even inside one long step of the loop.
func (s *Sim) Interrupt() { s.interrupted.Store(true) }

// Interrupted reports whether Interrupt was called.
func (s *Sim) Interrupted() bool { return s.interrupted.Load() }

// InterruptOn interrupts the simulation when ctx is done, and returns a
// function that stops watching ctx.
func (s *Sim) InterruptOn(ctx context.Context) (stop func() bool) {
	return context.AfterFunc(ctx, s.Interrupt)
}

// Run fires events until none is left or Stop is called.
func (s *Sim) Run() { s.RunUntil(Forever) }

// RunUntil fires events up to and including time limit, then sets the clock
// to limit (unless stopped or interrupted earlier, or limit is Forever).
func (s *Sim) RunUntil(limit Time) {
	s.stopped = false
	for len(s.heap) > 0 && !s.stopped {
		if s.fired%checkEvery == 0 && s.interrupted.Load() {
			s.stopped = true
			break
		}
		if s.heap[0].at > limit {
			s.now = limit
			return
		}
		e := s.pop()
		s.now = e.at
		s.fired++
		e.h.fire(s, e.p)
	}
	if !s.stopped && limit != Forever && s.now < limit {
		s.now = limit
	}
}

func (s *Sim) pop() event {
	h := s.heap
	e := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h[n] = event{}
	s.heap = h[:n]
	if n > 1 {
		s.down(0)
	}
	return e
}

func (s *Sim) up(i int) {
	h := s.heap
	e := h[i]
	for i > 0 {
		parent := (i - 1) / arity
		if !e.before(&h[parent]) {
			break
		}
		h[i] = h[parent]
		i = parent
	}
	h[i] = e
}

func (s *Sim) down(i int) {
	h := s.heap
	n := len(h)
	e := h[i]
	for {
		first := arity*i + 1
		if first >= n {
			break
		}
		c := first
		for k := first + 1; k < min(first+arity, n); k++ {
			if h[k].before(&h[c]) {
				c = k
			}
		}
		if !h[c].before(&e) {
			break
		}
		h[i] = h[c]
		i = c
	}
	h[i] = e
}

// Timer is a cancellable scheduled call. It implements emulator.Timer.
type Timer struct {
	fn   func()
	done bool
}

// Stop cancels the call and reports whether it was still pending.
func (t *Timer) Stop() bool {
	if t.done {
		return false
	}
	t.done = true
	return true
}

func (t *Timer) fire(*Sim, *Packet) {
	if t.done {
		return
	}
	t.done = true
	t.fn()
}
