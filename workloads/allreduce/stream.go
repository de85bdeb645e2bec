// Package allreduce holds the host side of tracebed's gradient aggregation:
// SwitchML's streaming all-reduce through a switch (Stream), the parameter
// server that aggregates in software for collisions and for jobs without
// switch memory (PS), the host ring all-reduce of the no-INA baseline
// (Ring), the training loop that alternates compute and all-reduce
// (Worker), quantisation of float gradients to int32, and the helpers that
// set up a packet-level job on a simulated network (Setup) or on any
// testbed, netns included (SetupOn).
//
// Every protocol is a sans-IO state machine driven through emulator.Env,
// and every one is exact: under loss, duplication and reordering each worker
// ends with the integer sum of the workers' tensors. docs/ina-dataplane.md
// describes the protocols.
package allreduce

import (
	"errors"
	"fmt"
	"time"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/p4/ina"
)

// ErrOverflow is wrapped by the error of an all-reduce whose sum overflowed
// int32 somewhere: the tensor then holds wrapped values and must not be used.
var ErrOverflow = errors.New("aggregate overflowed int32")

// Reducer is one all-reduce protocol seen from a worker: Stream and Ring
// implement it. A Reducer is driven from its agent's callbacks.
type Reducer interface {
	// Start binds the reducer to the agent's environment.
	Start(env emulator.Env)
	// AllReduce replaces tensor, in place, by the element-wise sum of every
	// worker's tensor of the same round, then calls done. It must not be
	// called again before done.
	AllReduce(tensor []int32, round uint32, done func(error))
	// Recv handles a datagram for the reducer.
	Recv(from emulator.Addr, payload []byte)
}

// StreamConfig configures a worker's streaming all-reduce.
type StreamConfig struct {
	Job     uint16
	Worker  uint8 // this worker's id, 0 to Workers-1
	Workers uint8
	// Target is where data packets go: the aggregation switch (its IP, port
	// ina.Port) for INA, or the parameter server for PS-only jobs.
	Target emulator.Addr
	// Window is the number of slots (chunks in flight); in pool mode at most
	// the pool size.
	Window int
	// K is the number of values per packet; 0 means ina.DefaultK.
	K int
	// Timeout is the retransmission timeout; 0 means 1ms.
	Timeout time.Duration
	// Remap makes the packets name their aggregator (shared mode with
	// ina.PlaceSlot, ATP's slot remapping): window slot i starts on
	// aggregator ina.FirstSlot(Job)+i and moves to the one each of its
	// results names.
	Remap bool
}

// StreamStats count a stream's packets.
type StreamStats struct {
	Sent, Retransmits uint64
	Results           uint64 // results accepted
	Ignored           uint64 // results for chunks not awaited (duplicates, late copies)
	Malformed         uint64
}

// Stream is SwitchML's self-clocked streaming all-reduce: a window of slots,
// each carrying chunk s, s+W, s+2W, … with its version bit flipping at each
// reuse; the next chunk of a slot is sent as soon as the slot's result
// arrives; a chunk whose result has not come back within the timeout is
// retransmitted.
type Stream struct {
	cfg   StreamConfig
	k     int
	env   emulator.Env
	Stats StreamStats

	tensor    []int32
	round     uint32
	chunks    int
	remaining int
	done      func(error)
	err       error
	running   bool

	slots []slot
	agg   []uint16 // Remap: the aggregator each window slot names
	buf   []byte
	zero  []int32

	// Retransmission deadlines in the order they were set, each Timeout
	// after it was set (so the queue is sorted); one timer is armed for the
	// head.
	dl      []deadline
	dlHead  int
	armed   bool
	timerAt time.Duration
}

type slot struct {
	chunk   int // chunk index in flight; -1 when idle
	ver     uint8
	sentAt  time.Duration
	retries uint8         // retransmissions of the chunk in flight
	dlAt    time.Duration // the slot's current deadline
}

// maxBackoff bounds the exponential backoff of retransmissions: the n-th
// retransmission of a packet waits Timeout·2^min(n, maxBackoff) after the
// previous send. A packet that is lost once is resent after one timeout,
// as before; only packets that keep timing out — the whole window after a
// stall of the host or the network, on a real machine — are resent less
// and less often, instead of repeatedly flooding a link that is already
// busy delivering their first copies.
const maxBackoff = 3

// backoff returns the wait before retransmitting a packet sent retries
// times before.
func backoff(timeout time.Duration, retries uint8) time.Duration {
	return timeout << min(retries, maxBackoff)
}

type deadline struct {
	slot  int
	chunk int
	at    time.Duration
}

// NewStream returns a stream; cfg is checked.
func NewStream(cfg StreamConfig) (*Stream, error) {
	if cfg.K == 0 {
		cfg.K = ina.DefaultK
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = time.Millisecond
	}
	switch {
	case cfg.Workers == 0 || cfg.Workers > ina.MaxWorkers:
		return nil, fmt.Errorf("stream: %d workers, want 1 to %d", cfg.Workers, ina.MaxWorkers)
	case cfg.Worker >= cfg.Workers:
		return nil, fmt.Errorf("stream: worker id %d of %d workers", cfg.Worker, cfg.Workers)
	case cfg.Window < 1 || cfg.Window > 1<<16:
		return nil, fmt.Errorf("stream: window of %d slots, want 1 to 65536", cfg.Window)
	case cfg.K < 1 || cfg.K > ina.MaxK:
		return nil, fmt.Errorf("stream: k = %d, want 1 to %d", cfg.K, ina.MaxK)
	case cfg.Job >= ina.MaxJobs:
		return nil, fmt.Errorf("stream: job %d, want below %d", cfg.Job, ina.MaxJobs)
	case !cfg.Target.IsValid():
		return nil, fmt.Errorf("stream: no target address")
	case cfg.Timeout < 0:
		return nil, fmt.Errorf("stream: negative timeout")
	}
	s := &Stream{cfg: cfg, k: cfg.K, slots: make([]slot, cfg.Window), zero: make([]int32, cfg.K)}
	for i := range s.slots {
		s.slots[i] = slot{chunk: -1, ver: 1} // the first use flips it to 0
	}
	if cfg.Remap {
		s.agg = make([]uint16, cfg.Window)
		for i := range s.agg {
			s.agg[i] = ina.FirstSlot(cfg.Job) + uint16(i)
		}
	}
	s.buf = make([]byte, ina.HeaderLen+4*cfg.K)
	return s, nil
}

// Start implements Reducer.
func (s *Stream) Start(env emulator.Env) { s.env = env }

// AllReduce implements Reducer.
func (s *Stream) AllReduce(tensor []int32, round uint32, done func(error)) {
	if s.running {
		done(fmt.Errorf("stream: all-reduce of round %d started while round %d runs", round, s.round))
		return
	}
	if uint64(len(tensor)) > 1<<32-uint64(s.k) {
		done(fmt.Errorf("stream: tensor of %d values exceeds the 32-bit chunk offset", len(tensor)))
		return
	}
	s.tensor, s.round, s.done, s.err = tensor, round, done, nil
	s.chunks = (len(tensor) + s.k - 1) / s.k
	s.remaining = s.chunks
	if s.chunks == 0 {
		s.finish()
		return
	}
	s.running = true
	for i := 0; i < len(s.slots) && i < s.chunks; i++ {
		s.assign(i, i)
	}
}

func (s *Stream) finish() {
	s.running = false
	done, err := s.done, s.err
	s.done = nil
	if done != nil {
		done(err)
	}
}

// assign puts chunk c into slot i and sends it.
func (s *Stream) assign(i, c int) {
	sl := &s.slots[i]
	sl.chunk = c
	sl.ver ^= 1
	sl.retries = 0
	s.send(i, false)
}

func (s *Stream) send(i int, retx bool) {
	sl := &s.slots[i]
	off := sl.chunk * s.k
	h := ina.Header{
		Flags: ina.FlagData, Job: s.cfg.Job, Slot: s.slotField(i), Ver: sl.ver,
		Worker: s.cfg.Worker, Workers: s.cfg.Workers, K: uint16(s.k),
		Round: s.round, Offset: uint32(off), Bitmap: 1 << s.cfg.Worker,
	}
	if retx {
		h.Flags |= ina.FlagRetransmit
		s.Stats.Retransmits++
		sl.retries++
	}
	h.Put(s.buf)
	end := min(off+s.k, len(s.tensor))
	ina.PutValues(s.buf[ina.HeaderLen:], s.tensor[off:end])
	if n := end - off; n < s.k {
		ina.PutValues(s.buf[ina.HeaderLen+4*n:], s.zero[:s.k-n])
	}
	s.env.Send(s.cfg.Target, s.buf)
	s.Stats.Sent++
	now := s.env.Now()
	sl.sentAt = now
	s.schedule(i, now+s.cfg.Timeout)
}

// slotField is the slot field of window slot i's packets: the slot, or
// with Remap the aggregator it names.
func (s *Stream) slotField(i int) uint16 {
	if s.agg != nil {
		return s.agg[i]
	}
	return uint16(i)
}

// schedule sets slot i's deadline.
func (s *Stream) schedule(i int, at time.Duration) {
	sl := &s.slots[i]
	sl.dlAt = at
	s.pushDeadline(deadline{slot: i, chunk: sl.chunk, at: at})
}

func (s *Stream) pushDeadline(d deadline) {
	if s.dlHead > 0 && s.dlHead >= len(s.dl)/2 {
		n := copy(s.dl, s.dl[s.dlHead:])
		s.dl = s.dl[:n]
		s.dlHead = 0
	}
	s.dl = append(s.dl, d)
	if !s.armed {
		s.arm(d.at)
	}
}

func (s *Stream) arm(at time.Duration) {
	s.armed = true
	s.timerAt = at
	s.env.After(at-s.env.Now(), s.onTimer)
}

// onTimer defers the scan of the deadlines behind whatever the agent's
// loop has already queued: on a real host a timer that fires after the
// loop was held up finds the results that arrived meanwhile waiting
// behind it, and they must be seen before deciding what is lost. (On sim
// the scan runs at the same instant.)
func (s *Stream) onTimer() { s.env.After(0, s.expire) }

func (s *Stream) expire() {
	s.armed = false
	now := s.env.Now()
	for s.dlHead < len(s.dl) {
		d := s.dl[s.dlHead]
		sl := &s.slots[d.slot]
		if sl.chunk != d.chunk || !s.running {
			s.dlHead++ // answered
			continue
		}
		if sl.dlAt != d.at {
			s.dlHead++ // superseded by a later deadline of the slot
			continue
		}
		if d.at > now {
			break
		}
		s.dlHead++
		if now >= sl.sentAt+backoff(s.cfg.Timeout, sl.retries) {
			s.send(d.slot, true)
		} else {
			s.schedule(d.slot, now+s.cfg.Timeout) // backing off
		}
	}
	if s.dlHead < len(s.dl) && !s.armed {
		s.arm(s.dl[s.dlHead].at)
	}
}

// Recv implements Reducer.
func (s *Stream) Recv(_ emulator.Addr, payload []byte) {
	h, vals, err := ina.Parse(payload)
	if err != nil || h.Flags&ina.FlagResult == 0 || h.Job != s.cfg.Job || int(h.K) != s.k {
		s.Stats.Malformed++
		return
	}
	if !s.running || h.Round != s.round || h.Offset%uint32(s.k) != 0 {
		s.Stats.Ignored++
		return
	}
	c := int(h.Offset) / s.k
	if c >= s.chunks {
		s.Stats.Ignored++
		return
	}
	i := c % len(s.slots)
	sl := &s.slots[i]
	if sl.chunk != c {
		s.Stats.Ignored++
		return
	}
	s.Stats.Results++
	if s.agg != nil {
		s.agg[i] = h.Slot // the aggregator the slot's next chunk uses
	}
	if h.Flags&ina.FlagOverflow != 0 && s.err == nil {
		s.err = fmt.Errorf("job %d round %d chunk at offset %d: %w", s.cfg.Job, s.round, h.Offset, ErrOverflow)
	}
	off := int(h.Offset)
	end := min(off+s.k, len(s.tensor))
	ina.GetValues(s.tensor[off:end], vals)
	sl.chunk = -1
	s.remaining--
	if next := c + len(s.slots); next < s.chunks {
		s.assign(i, next)
	}
	if s.remaining == 0 {
		s.finish()
	}
}
