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

// handler is what an event does when it fires. The network's ports,
// frames and timers implement it, so the hot path allocates no closures.
type handler interface {
	fire(s *Sim)
}

// arity is the number of children of a node of the event heap: a 4-ary heap
// is shallower than a binary one and touches fewer cache lines per pop.
const arity = 4

// event is one entry of the event heap: a single event, or a batch (its h
// is the *batch, its seq that of the batch's next event). It is kept to
// four machine words, which the compiler holds in registers: a larger
// struct is copied through memory on every move of the heap, and the CPU
// stalls reading back what it has just written. What an event carries (a
// frame in flight) lives in its handler (see Packet.fire, port.fire).
type event struct {
	at  Time
	seq uint64
	h   handler
}

// batch holds events due at one instant, in the order of their sequence
// numbers. Packet networks schedule many events for the same instant (the
// frames of synchronized senders, the timers set for one serialization
// time later), and an event that joins a batch costs an append instead of
// a trip through the heap. The batch sits in the heap as one entry keyed
// by its next event, and is keyed again after each event it gives out, so
// the heap gives events in exactly the (time, sequence) order it gives
// without batches.
type batch struct {
	at   Time
	evs  []event
	next int // evs[next:] are pending
	live bool
}

// batch satisfies handler so that it can stand in the heap; the event loop
// takes events out of it and never fires it.
func (*batch) fire(*Sim) {}

// recentBits sizes the table of instants the scheduler remembers, to add
// events to their batch: a direct-mapped table of 2^recentBits instants,
// since a packet's events go to a few instants (its serialization at each
// hop, its arrivals, the sender's next timer).
const recentBits = 4

// recent is an instant events were scheduled for, and its batch if it has
// one yet.
type recent struct {
	at Time
	b  *batch
}

// Sim is the event core. The zero value is not usable; call New.
type Sim struct {
	now     Time
	seq     uint64
	heap    []event
	pending int // events scheduled and not fired, batched or not
	stopped bool
	fired   uint64
	timers  []Timer // the rest of the current slab (newTimer)

	recent  [1 << recentBits]recent // instants scheduled for lately, by hash
	batches []*batch                // spent batches, to reuse

	// The key of the root's least child, while boundOK: a batch at the
	// root that still precedes it stays there without a sift.
	boundAt  Time
	boundSeq uint64
	boundOK  bool

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
func (s *Sim) Pending() int { return s.pending }

// funcHandler runs a plain function.
type funcHandler func()

func (f funcHandler) fire(*Sim) { f() }

// At schedules f at time t; a time in the past means now.
func (s *Sim) At(t Time, f func()) { s.schedule(t, funcHandler(f)) }

// After schedules f after d and returns a Timer that can cancel it.
func (s *Sim) After(d Time, f func()) *Timer {
	t := s.newTimer(f)
	s.schedule(s.now+max(d, 0), t)
	return t
}

// timerSlab is how many Timers one allocation makes: agents set a timer
// for nearly every packet they send, and a Timer may be held (to Stop it)
// after it fired, so Timers are never reused, but they are carved out of
// slabs to keep the allocation off the path of every packet.
const timerSlab = 256

func (s *Sim) newTimer(f func()) *Timer {
	if len(s.timers) == 0 {
		s.timers = make([]Timer, timerSlab)
	}
	t := &s.timers[0]
	s.timers = s.timers[1:]
	t.fn = f
	return t
}

// schedule adds an event with a new sequence number, the largest yet, so
// that it may join the batch of its instant: a second event for an instant
// scheduled lately opens a batch, and later ones join it.
func (s *Sim) schedule(at Time, h handler) {
	if at < s.now {
		at = s.now
	}
	s.seq++
	s.pending++
	e := event{at: at, seq: s.seq, h: h}
	r := &s.recent[uint64(at)*0x9e3779b97f4a7c15>>(64-recentBits)]
	if r.at != at {
		*r = recent{at: at}
		s.heapPush(e)
		return
	}
	if b := r.b; b != nil && b.live && b.at == at {
		b.evs = append(b.evs, e)
		return
	}
	b := s.newBatch(at)
	b.evs = append(b.evs, e)
	r.b = b
	s.heapPush(event{at: at, seq: e.seq, h: b})
}

func (s *Sim) newBatch(at Time) *batch {
	var b *batch
	if k := len(s.batches); k > 0 {
		b = s.batches[k-1]
		s.batches = s.batches[:k-1]
	} else {
		b = &batch{evs: make([]event, 0, 16)}
	}
	b.at, b.next, b.live = at, 0, true
	return b
}

// push adds an event whose sequence number was already drawn (and may be
// older than events scheduled since, so it never joins a batch).
func (s *Sim) push(e event) {
	s.pending++
	s.heapPush(e)
}

func (s *Sim) heapPush(e event) {
	s.heap = append(s.heap, e)
	s.up(len(s.heap) - 1)
	s.boundOK = false
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
		e := s.next()
		s.now = e.at
		s.fired++
		s.pending--
		e.h.fire(s)
	}
	if !s.stopped && limit != Forever && s.now < limit {
		s.now = limit
	}
}

// next removes and returns the first event.
func (s *Sim) next() event {
	top := &s.heap[0]
	b, ok := top.h.(*batch)
	if !ok {
		s.boundOK = false
		return s.pop()
	}
	e := b.evs[b.next]
	b.next++
	if b.next < len(b.evs) {
		// Key the batch by its next event; it stays at the root while
		// that precedes the root's least child.
		seq := b.evs[b.next].seq
		top.seq = seq
		if !s.boundOK {
			s.bound()
		}
		if b.at > s.boundAt || (b.at == s.boundAt && seq > s.boundSeq) {
			s.down(0)
			s.boundOK = false
		}
		return e
	}
	s.pop()
	s.boundOK = false
	b.live = false
	clear(b.evs)
	b.evs = b.evs[:0]
	s.batches = append(s.batches, b)
	return e
}

// bound finds the key of the root's least child.
func (s *Sim) bound() {
	h := s.heap
	s.boundAt, s.boundSeq, s.boundOK = Forever, 1<<64-1, true
	for k := 1; k <= arity && k < len(h); k++ {
		if at := h[k].at; at < s.boundAt || (at == s.boundAt && h[k].seq < s.boundSeq) {
			s.boundAt, s.boundSeq = at, h[k].seq
		}
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
		if p := &h[parent]; e.at > p.at || (e.at == p.at && e.seq > p.seq) {
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
		c := arity*i + 1
		if c >= n {
			break
		}
		end := min(c+arity, n)
		// The least child, its key kept in registers.
		m, mat, mseq := c, h[c].at, h[c].seq
		for k := c + 1; k < end; k++ {
			if at := h[k].at; at < mat || (at == mat && h[k].seq < mseq) {
				m, mat, mseq = k, at, h[k].seq
			}
		}
		if e.at < mat || (e.at == mat && e.seq < mseq) {
			break
		}
		h[i] = h[m]
		i = m
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

func (t *Timer) fire(*Sim) {
	if t.done {
		return
	}
	t.done = true
	t.fn()
}
