// Package paging holds the agents of tracebed's far-memory experiments: the
// paging host, which replays an application's page-access trace with a
// limited local memory and pages to memory servers over the network, and the
// memory server, which stores the pages. Both are sans-IO state machines
// over emulator.Env, so they run unchanged on the simulated network and on
// real sockets; their messages are p4/farmem's.
//
// # The host
//
// The host replays a memtrace.Source: compute for an access's gap, then touch
// its page. A page is untouched (never used), resident (in a local frame),
// fetching (a frame is held and a read is in flight), evicting (picked as a
// victim: unmapped, its write-back possibly in flight) or remote. The host
// has Limit + Headroom frames (evict.State). Touching a resident page is a
// hit and costs nothing but its gap: the application runs ahead through hits
// in one callback without scheduling events. Touching an untouched page
// allocates a frame (a first touch, zero-filled: the page is dirty). Touching
// a remote page is a fault: a frame is taken and the page is fetched from
// its memory server (pages are striped over the servers); the application
// waits for it. Touching an evicting page rescues it: it is mapped again, as
// Linux finds a page in the swap cache, and its eviction is abandoned.
//
// Allocations and faults need a free frame. When none is free the
// application blocks and reclaims pages itself (direct reclaim, as many as
// the policy's Engine.Direct says); the blocking event — its start and
// duration — is recorded. Independently, a background reclaimer (Fastswap's
// dedicated reclaim core) evicts pages whenever the policy's
// Engine.Background asks. Both reclaim one page at a time, as Fastswap's
// frontswap store does (an RDMA write and a wait for its completion): pick a
// victim with CLOCK or LRU, spend ReclaimOverhead of CPU, then drop it if it
// is clean (the server holds its current version) or write it back and free
// its frame when the server acknowledges.
//
// # Protocol and integrity
//
// Reads and writes carry a request id and are retransmitted on a timeout
// (RFC 6298 estimator, exponential back-off), so the protocol survives loss,
// duplication and reordering. Every write-back carries a new version of the
// page and the CRC-32C of its bytes; the host remembers, per page, the
// version and checksum it last wrote and checks every page it fetches
// against them, and its bytes against that version's (which the host
// generates, see content). A mismatch is an integrity error, counted,
// never silent.
package paging

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"slices"
	"time"

	"github.com/tracebed/tracebed/analysis"
	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/p4/farmem"
	"github.com/tracebed/tracebed/systems/evict"
	memtrace "github.com/tracebed/tracebed/traces/mem"
)

// Replacement is a victim-selection algorithm.
type Replacement string

// Replacement algorithms.
const (
	Clock Replacement = "clock" // second chance over the frames
	LRU   Replacement = "lru"   // exact least-recently-used
)

// HostConfig configures a paging host.
type HostConfig struct {
	// ID identifies the host in page contents (any value unique per run).
	ID uint32
	// Limit is the application's local memory in pages; Headroom the
	// reclaimer's extra frames (Fastswap's offload range). Frames = Limit +
	// Headroom must be at least 1.
	Limit, Headroom int
	// PageSize in bytes (a power of two, farmem.MinPageSize to MaxPageSize).
	PageSize int
	// Servers are the memory servers; page p lives on server (p + Stripe)
	// mod len(Servers).
	Servers []emulator.Addr
	Stripe  int
	// Replacement picks victims: Clock (default) or LRU.
	Replacement Replacement
	// Engine and Marker are the policy under study.
	Engine evict.Engine
	Marker evict.Marker
	// FaultOverhead is the CPU time of a major fault besides the fetch
	// (exception, page-table update). ReclaimOverhead is the CPU time to
	// reclaim one page (scan, unmap, TLB shootdown) before it is dropped or
	// written back.
	FaultOverhead, ReclaimOverhead time.Duration
	// RunAhead bounds how far past the current time the application replays
	// hits while a reclaimer or a request is active (DefaultRunAhead); with
	// nothing else going on it replays hits up to its next miss. Pages used
	// in that window are not picked as victims.
	RunAhead time.Duration
	// RTOMin, RTOMax and RTOInit bound the retransmission timeout
	// (DefaultRTOMin, DefaultRTOMax, DefaultRTOInit).
	RTOMin, RTOMax, RTOInit time.Duration
	// MeasurePeriod is the window of the demand-rate estimate
	// (DefaultMeasurePeriod), and PeakHorizon how far back the demand peak
	// looks (evict.PeakHorizon).
	MeasurePeriod, PeakHorizon time.Duration
	// Seed seeds the page contents.
	Seed uint64
	// OnDone, if set, is called once when the trace is replayed and every
	// write-back has been acknowledged.
	OnDone func(*Host)
}

// Defaults of HostConfig's timing fields: the paper-scale values (an
// experiment at scale s multiplies every one of them by s).
const (
	DefaultRunAhead      = 5 * time.Microsecond
	DefaultRTOMin        = 100 * time.Microsecond
	DefaultRTOMax        = 100 * time.Millisecond
	DefaultRTOInit       = time.Millisecond
	DefaultMeasurePeriod = 20 * time.Microsecond
)

// Page states.
const (
	untouched uint8 = iota
	resident
	fetching
	evicting
	remote
)

// page is a page-table entry. Its fields are ordered to leave no padding:
// 32 bytes, two entries to a cache line, so that a hit, which reads and
// writes one entry of a table larger than the caches, touches one line.
type page struct {
	state   uint8
	dirty   bool // resident data differs from the server's copy
	ref     bool // CLOCK's reference bit
	wb      bool // a write-back of this page is in flight
	version uint32
	sum     uint32
	frame   int32
	last    time.Duration // time of the last access (may be ahead of now)
	prev    int32         // LRU list, towards the most recent
	next    int32         // LRU list, towards the least recent
}

// BlockEvent is one period the application spent blocked for a free frame.
type BlockEvent struct {
	Start, Duration time.Duration
}

// Stats are what a host measured.
type Stats struct {
	Ops          uint64 // accesses replayed
	Hits         uint64
	FirstTouches uint64
	Faults       uint64 // major faults: remote pages fetched
	Rescues      uint64 // evicting pages touched again
	Evictions    uint64 // frames freed by eviction
	Writebacks   uint64 // dirty pages written back (acknowledged)
	CleanDrops   uint64 // clean pages dropped without a write
	Retransmits  uint64
	Integrity    uint64 // pages fetched that differ from the last version written
	Duplicates   uint64 // responses for requests already answered
	// Completion is how long the replay took, from Start to the last
	// access (on a real substrate, agents start one after another).
	Completion time.Duration
	// FaultLatency holds each fault's latency, from the access to the
	// page mapped: every one up to analysis.MaxExactDurations, a
	// histogram beyond (memory does not grow with the run).
	FaultLatency analysis.Durations
	// Blocks are the blocking events: every one up to MaxBlockEvents,
	// then an evenly thinned sample that always keeps the longest;
	// BlockCount and Blocked, their number and total time, stay exact.
	Blocks     []BlockEvent
	BlockCount uint64
	Blocked    time.Duration
	// IntegrityDetail describes the first integrity errors.
	IntegrityDetail []string
	// TraceError is set when the trace could not be replayed to its end
	// (malformed, or a page number beyond MaxPages).
	TraceError string

	blockStride  uint64
	longestBlock time.Duration
}

// MaxBlockEvents bounds the blocking events a host keeps one by one
// (Stats.Blocks).
const MaxBlockEvents = 1 << 16

// addBlock records a blocking event. Past MaxBlockEvents, every other kept
// event is dropped (the longest stays) and from then on every 2nd, 4th, …
// new one is kept: an even sample of the run in bounded memory.
func (st *Stats) addBlock(b BlockEvent) {
	st.BlockCount++
	st.Blocked += b.Duration
	if st.blockStride == 0 {
		st.blockStride = 1
	}
	longest := b.Duration > st.longestBlock
	if longest {
		st.longestBlock = b.Duration
	}
	if (st.BlockCount-1)%st.blockStride != 0 && !longest {
		return
	}
	if len(st.Blocks) == MaxBlockEvents {
		kept := st.Blocks[:0]
		for i, e := range st.Blocks {
			if i%2 == 0 || e.Duration == st.longestBlock {
				kept = append(kept, e)
			}
		}
		st.Blocks = kept
		st.blockStride *= 2
	}
	st.Blocks = append(st.Blocks, b)
}

// MaxPages bounds the page numbers a host replays: its page table is dense.
// Renumber sparse traces (memtrace's lackey import does by default).
const MaxPages = 1 << 26

// Host is a paging host. It implements emulator.Agent.
type Host struct {
	cfg     HostConfig
	env     emulator.Env
	src     memtrace.Source
	content *content

	pages  []page
	frames []int32 // frame → page, -1 if free
	free   []int32 // free frames
	hand   int     // CLOCK hand
	head   int32   // LRU: most recent; -1 if empty
	tail   int32   // LRU: least recent

	used, evictingN int
	pressure        bool

	// The application.
	buf      []memtrace.Access
	pos, n   int
	eof      bool
	gapDone  bool          // the gap of buf[pos] has elapsed
	wakeAt   time.Duration // when the current sleep is meant to end
	startAt  time.Duration // when the replay started
	waiting  bool          // blocked, or waiting for a fetch
	blocked  bool          // blocked for a free frame
	blockAt  time.Duration // start of the current block
	faultAt  time.Duration // start of the current fault
	finished bool
	done     bool

	bg, direct worker

	// Outstanding requests, in the order sent (retransmissions go in that
	// order). One timer serves them all, armed for the earliest deadline.
	nextID   uint32
	order    []*request
	rtoTimer emulator.Timer
	timerAt  time.Duration
	srtt     time.Duration
	rttvar   time.Duration
	rto      time.Duration

	// Estimates.
	demandN    int
	demandRate float64
	peaks      []float64 // windowed rates of the last PeakHorizon, a ring
	peakAt     int
	peakMax    float64 // slices.Max(peaks), kept as peaks change
	winEnd     time.Duration
	evLat      time.Duration
	evLatDev   time.Duration
	wbuf       []byte
	tailStamp  [stampTail]byte // a write-back's tail stamp, a part of its datagram
	scratch    []byte
	stats      Stats

	// Spent requests, to reuse, and the callbacks the host schedules,
	// made once: a method value or closure passed to Env.After is an
	// allocation per call.
	freeReqs              []*request
	st                    evict.State // what the policy is shown (a pointer to a local would escape)
	resumeFn, resumeNowFn func()
	tickFn                func()
}

// worker is a reclaimer: the background one or the application in direct
// reclaim. It evicts one page at a time.
type worker struct {
	direct bool
	active bool
	quota  int   // pages still to free
	victim int32 // page being evicted, -1 if none
	picked time.Duration

	stepFn, evictFn func() // h.step(w) and h.evict(w)
}

// request is an outstanding read or write.
type request struct {
	id      uint32
	typ     farmem.Type
	page    int32
	version uint32
	sum     uint32
	sent    time.Duration
	retx    int
	rto     time.Duration
	due     time.Duration // retransmit at
	w       *worker       // the write's reclaimer
}

// NewHost returns a host that replays src.
func NewHost(cfg HostConfig, src memtrace.Source, pagesHint int) (*Host, error) {
	if cfg.Limit < 0 || cfg.Headroom < 0 || cfg.Limit+cfg.Headroom < 1 {
		return nil, fmt.Errorf("paging host: limit %d + headroom %d frames: want at least one frame", cfg.Limit, cfg.Headroom)
	}
	if cfg.PageSize == 0 {
		cfg.PageSize = memtrace.DefaultPageSize
	}
	if cfg.PageSize < farmem.MinPageSize || cfg.PageSize > farmem.MaxPageSize || cfg.PageSize&(cfg.PageSize-1) != 0 {
		return nil, fmt.Errorf("paging host: page size %d: want a power of two from %d to %d", cfg.PageSize, farmem.MinPageSize, farmem.MaxPageSize)
	}
	if len(cfg.Servers) == 0 {
		return nil, errors.New("paging host: no memory servers")
	}
	if cfg.Engine == nil {
		return nil, errors.New("paging host: no eviction engine")
	}
	if cfg.Marker == nil {
		cfg.Marker = evict.NoUrgency{}
	}
	switch cfg.Replacement {
	case "":
		cfg.Replacement = Clock
	case Clock, LRU:
	default:
		return nil, fmt.Errorf("paging host: replacement %q: want clock or lru", cfg.Replacement)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.RunAhead, DefaultRunAhead)
	def(&cfg.RTOMin, DefaultRTOMin)
	def(&cfg.RTOMax, DefaultRTOMax)
	def(&cfg.RTOInit, DefaultRTOInit)
	def(&cfg.MeasurePeriod, DefaultMeasurePeriod)
	def(&cfg.PeakHorizon, evict.PeakHorizon)
	frames := cfg.Limit + cfg.Headroom
	h := &Host{
		cfg: cfg, src: src,
		pages:  make([]page, max(pagesHint, 0)),
		frames: make([]int32, frames),
		free:   make([]int32, 0, frames),
		head:   -1,
		tail:   -1,
		buf:    make([]memtrace.Access, 1024),
		rto:    cfg.RTOInit,
		bg:     worker{victim: -1},
		direct: worker{direct: true, victim: -1},
		peaks:  make([]float64, max(1, int(cfg.PeakHorizon/cfg.MeasurePeriod))),
	}
	for i := range h.pages {
		h.pages[i] = page{frame: -1, prev: -1, next: -1}
	}
	h.resumeFn, h.resumeNowFn, h.tickFn = h.resume, h.resumeNow, h.tick
	for _, w := range []*worker{&h.bg, &h.direct} {
		w.stepFn = func() { h.step(w) }
		w.evictFn = func() { h.evict(w) }
	}
	for f := frames - 1; f >= 0; f-- {
		h.frames[f] = -1
		h.free = append(h.free, int32(f))
	}
	return h, nil
}

// Start implements emulator.Agent.
func (h *Host) Start(env emulator.Env) {
	h.env = env
	h.startAt = env.Now()
	h.content = newContent(h.cfg.ID, h.cfg.Seed, h.cfg.PageSize)
	h.winEnd = env.Now() + h.cfg.MeasurePeriod
	h.run(0)
}

// Stats returns what the host measured so far.
func (h *Host) Stats() *Stats { return &h.stats }

// Done reports whether the trace is replayed and every write-back
// acknowledged.
func (h *Host) Done() bool { return h.done }

// Finished reports whether the trace is replayed (write-backs may still be
// in flight).
func (h *Host) Finished() bool { return h.finished }

// State returns the state the host shows its policy.
func (h *Host) State() evict.State {
	now := h.env.Now()
	h.roll(now)
	return evict.State{
		Now: now, Limit: h.cfg.Limit, Frames: len(h.frames), Used: h.used, Evicting: h.evictingN,
		Pressure: h.pressure, Blocked: h.blocked, DemandRate: h.demandRate, DemandPeak: h.peakMax,
		EvictLatency: h.evLat, EvictLatencyDev: h.evLatDev,
	}
}

// ---- the application ----

// run replays accesses from the current time plus extra (CPU time already
// spent, such as a fault's overhead; negative after a late timer, see
// resume) until it must wait.
func (h *Host) run(extra time.Duration) {
	if h.finished || h.waiting {
		return
	}
	now := h.env.Now()
	t := now + extra
	limit := time.Duration(math.MaxInt64)
	if h.active() {
		limit = now + h.cfg.RunAhead
	}
	for {
		if h.pos == h.n {
			if !h.refill() {
				h.finish(t)
				return
			}
		}
		a := &h.buf[h.pos]
		at := t
		if !h.gapDone {
			at += a.Gap
		}
		if a.Page >= uint64(len(h.pages)) {
			if a.Page >= MaxPages {
				h.stats.TraceError = fmt.Sprintf("access %d: page %d is beyond the host's %d pages (renumber the trace densely)", h.stats.Ops+1, a.Page, MaxPages)
				h.eof, h.pos, h.n = true, 0, 0
				h.finish(t)
				return
			}
			h.grow(a.Page)
		}
		pg := &h.pages[a.Page]
		if at <= limit {
			if pg.state == resident {
				h.touch(int32(a.Page), pg, at, a.Write)
				h.stats.Hits++
				h.advance()
				t = at
				continue
			}
			if h.quietTouch(pg) {
				h.take(int32(a.Page), at)
				h.firstTouch(int32(a.Page), pg, at, a.Write)
				h.advance()
				t = at
				continue
			}
		}
		if at > now {
			h.gapDone = true
			h.sleep(at - now)
			return
		}
		// The access is due (at now; at the latest now after a late
		// timer, see resume) and is not a plain hit.
		h.gapDone = true
		if !h.miss(int32(a.Page), a.Write, now) {
			return
		}
		h.advance()
		t = at // = now on sim; the application's schedule otherwise
		if h.active() {
			limit = now + h.cfg.RunAhead
		}
	}
}

func (h *Host) advance() {
	h.pos++
	h.gapDone = false
	h.stats.Ops++
}

// sleep lets the application compute for d.
func (h *Host) sleep(d time.Duration) {
	h.wakeAt = h.env.Now() + d
	h.env.After(d, h.resumeFn)
}

// resume ends a sleep. The replay goes on from the time the sleep was meant
// to end: a real substrate's timer may fire late, and that lateness is the
// emulation's, not the application's — it must not push the rest of the
// application's compute back (it would add up over thousands of sleeps).
// Only the next miss is late, as it cannot be sent before now. On sim,
// timers are exact and the two times are equal.
func (h *Host) resume() { h.run(h.wakeAt - h.env.Now()) }

// resumeNow retries the access that blocked.
func (h *Host) resumeNow() { h.run(0) }

// refill reads the next accesses; false at the end of the trace.
func (h *Host) refill() bool {
	if h.eof {
		return false
	}
	n, err := h.src.Read(h.buf)
	h.pos, h.n = 0, n
	if err != nil {
		h.eof = true
		if !errors.Is(err, io.EOF) {
			h.stats.TraceError = err.Error()
		}
	}
	return n > 0
}

// grow extends the page table to hold page p.
func (h *Host) grow(p uint64) {
	n := max(int(p)+1, 2*len(h.pages))
	for i := len(h.pages); i < n; i++ {
		h.pages = append(h.pages, page{frame: -1, prev: -1, next: -1})
	}
}

// touch records an access to a resident page at time at.
func (h *Host) touch(p int32, pg *page, at time.Duration, write bool) {
	pg.ref = true
	pg.last = at
	if write {
		pg.dirty = true
	}
	if h.cfg.Replacement == LRU && h.head != p {
		h.lruUnlink(p)
		h.lruPush(p)
	}
}

// miss handles an access that is not a hit, at time now. It reports whether
// the application may go on at once.
func (h *Host) miss(p int32, write bool, now time.Duration) bool {
	pg := &h.pages[p]
	switch pg.state {
	case resident: // a hit beyond the run-ahead window
		h.touch(p, pg, now, write)
		h.stats.Hits++
		return true
	case evicting:
		h.stats.Rescues++
		pg.state = resident
		h.evictingN--
		h.touch(p, pg, now, write)
		return true
	}
	// untouched or remote (never fetching: the application waits for its
	// one fetch): a frame is needed.
	if len(h.free) == 0 {
		h.block(now)
		return false
	}
	h.take(p, now)
	if pg.state == untouched {
		h.firstTouch(p, pg, now, write)
		h.consult()
		return true
	}
	// A major fault: the read goes out before the reclaimer, if it starts,
	// sends anything.
	h.stats.Faults++
	pg.state = fetching
	h.faultAt = now
	h.waiting = true
	h.send(h.newRequest(request{typ: farmem.TypeRead, page: p, version: pg.version, sum: pg.sum}))
	h.consult()
	return false
}

// firstTouch maps a zero-filled page the server has never seen (dirty).
func (h *Host) firstTouch(p int32, pg *page, at time.Duration, write bool) {
	h.stats.FirstTouches++
	pg.state = resident
	pg.dirty = true
	h.touch(p, pg, at, write)
}

// quietTouch reports whether a first touch can be replayed ahead of time,
// like a hit: a frame is free and taking it cannot make any policy evict
// (usage stays within the limit and no pressure has been seen).
func (h *Host) quietTouch(pg *page) bool {
	return pg.state == untouched && len(h.free) > 0 && !h.pressure && h.used < h.cfg.Limit
}

// take gives a free frame to page p, a demand at time at.
func (h *Host) take(p int32, at time.Duration) {
	f := h.free[len(h.free)-1]
	h.free = h.free[:len(h.free)-1]
	h.frames[f] = p
	pg := &h.pages[p]
	pg.frame = f
	h.used++
	h.demand(at)
	if h.used > h.cfg.Limit {
		h.pressure = true
	}
	if h.cfg.Replacement == LRU {
		h.lruPush(p)
	}
}

// release frees the frame of page p.
func (h *Host) release(p int32) {
	pg := &h.pages[p]
	h.frames[pg.frame] = -1
	h.free = append(h.free, pg.frame)
	pg.frame = -1
	h.used--
	if h.cfg.Replacement == LRU {
		h.lruUnlink(p)
	}
}

// fetched maps a fetched page and lets the application go on.
func (h *Host) fetched(p int32, write bool) {
	now := h.env.Now()
	pg := &h.pages[p]
	pg.state = resident
	pg.dirty = false
	h.touch(p, pg, now, write)
	h.stats.FaultLatency.Add(now + h.cfg.FaultOverhead - h.faultAt)
	h.waiting = false
	h.advance()
	h.run(h.cfg.FaultOverhead)
}

// block starts a blocking event: the application reclaims pages itself.
func (h *Host) block(now time.Duration) {
	h.blocked, h.waiting = true, true
	h.blockAt = now
	h.st = h.State()
	n := max(h.cfg.Engine.Direct(&h.st), 1)
	h.start(&h.direct, n)
}

// unblock ends the blocking event; the access is retried in a callback of
// its own, so that a chain of blocks never deepens the stack.
func (h *Host) unblock() {
	now := h.env.Now()
	h.stats.addBlock(BlockEvent{Start: h.blockAt, Duration: now - h.blockAt})
	h.blocked, h.waiting = false, false
	h.env.After(0, h.resumeNowFn)
}

// finish ends the replay at time t (maybe ahead of now).
func (h *Host) finish(t time.Duration) {
	now := h.env.Now()
	if t > now {
		h.sleep(t - now) // resume at t and find the end again
		return
	}
	h.finished = true
	h.stats.Completion = t - h.startAt // t = now, unless a late timer woke the replay
	h.bg.quota = 0                     // the application is gone: no more background eviction
	h.checkDone()
}

func (h *Host) checkDone() {
	if h.finished && !h.done && len(h.order) == 0 && !h.bg.active && !h.direct.active {
		h.done = true
		if h.cfg.OnDone != nil {
			h.cfg.OnDone(h)
		}
	}
}

// active reports whether anything besides the application is going on.
func (h *Host) active() bool {
	return h.bg.active || h.direct.active || len(h.order) > 0
}

// ---- estimates ----

func (h *Host) demand(now time.Duration) {
	h.roll(now)
	h.demandN++
}

// roll closes the demand-rate windows that ended by now.
func (h *Host) roll(now time.Duration) {
	const alpha = 0.25
	if now < h.winEnd {
		return
	}
	period := h.cfg.MeasurePeriod
	rate := float64(h.demandN) / period.Seconds()
	h.demandRate = (1-alpha)*h.demandRate + alpha*rate
	h.demandN = 0
	h.winEnd += period
	h.peak(rate)
	if now >= h.winEnd {
		k := int64((now-h.winEnd)/period) + 1
		h.demandRate *= decay(k)
		h.winEnd += time.Duration(k) * period
		for range min(k, int64(len(h.peaks))) {
			h.peak(0)
		}
	}
}

// decays are math.Pow(0.75, k) for the first k: 1 − the smoothing factor
// of roll, raised to the windows that passed without demand.
var decays = func() (t [64]float64) {
	for k := range t {
		t[k] = math.Pow(0.75, float64(k))
	}
	return t
}()

// decay returns math.Pow(0.75, k), the same bits whether from the table
// or not.
func decay(k int64) float64 {
	if k < int64(len(decays)) {
		return decays[k]
	}
	return math.Pow(0.75, float64(k))
}

// peak records a window's rate in the ring of the last PeakHorizon.
func (h *Host) peak(rate float64) {
	old := h.peaks[h.peakAt]
	h.peaks[h.peakAt] = rate
	h.peakAt = (h.peakAt + 1) % len(h.peaks)
	// The maximum changes when a larger rate comes in, or when the
	// largest goes out of the ring (rates are never NaN).
	switch {
	case rate >= h.peakMax:
		h.peakMax = rate
	case old == h.peakMax:
		h.peakMax = slices.Max(h.peaks)
	}
}

// sampleEviction feeds the eviction-latency estimator.
func (h *Host) sampleEviction(d time.Duration) {
	if h.evLat == 0 {
		h.evLat, h.evLatDev = d, d/2
		return
	}
	h.evLatDev = (3*h.evLatDev + abs(h.evLat-d)) / 4
	h.evLat = (7*h.evLat + d) / 8
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// ---- reclaim ----

// consult asks the engine whether the idle background reclaimer should run.
func (h *Host) consult() {
	if h.bg.active || h.finished {
		return
	}
	h.st = h.State()
	if n := h.cfg.Engine.Background(&h.st); n > 0 {
		h.start(&h.bg, n)
	}
}

func (h *Host) start(w *worker, n int) {
	w.active = true
	w.quota = n
	h.step(w)
}

// step picks the worker's next victim, or ends its batch.
func (h *Host) step(w *worker) {
	for {
		if w.quota <= 0 {
			w.active = false
			if w.direct {
				h.unblock()
			} else {
				h.consult()
			}
			h.checkDone()
			return
		}
		now := h.env.Now()
		v := h.pick(now)
		if v < 0 {
			// Every frame is busy (being fetched, evicted, or used right
			// now by the application): try again shortly.
			h.env.After(h.cfg.RunAhead, w.stepFn)
			return
		}
		pg := &h.pages[v]
		pg.state = evicting
		h.evictingN++
		w.victim, w.picked = v, now
		if h.cfg.ReclaimOverhead > 0 {
			h.env.After(h.cfg.ReclaimOverhead, w.evictFn)
			return
		}
		if !h.evict(w) {
			return // a write-back is in flight
		}
	}
}

// evict drops or writes back the worker's victim. It reports whether the
// worker may pick its next victim at once (the page was dropped, or rescued
// meanwhile).
func (h *Host) evict(w *worker) bool {
	v := w.victim
	pg := &h.pages[v]
	if pg.state != evicting { // rescued during the reclaim overhead
		w.victim = -1
		if h.cfg.ReclaimOverhead > 0 {
			h.step(w)
		}
		return true
	}
	if !pg.dirty && pg.version > 0 {
		h.freeVictim(w)
		h.stats.CleanDrops++
		if h.cfg.ReclaimOverhead > 0 {
			h.step(w)
		}
		return true
	}
	pg.dirty = false
	pg.wb = true
	h.send(h.newRequest(request{typ: farmem.TypeWrite, page: v, version: pg.version + 1, w: w}))
	return false
}

// freeVictim frees the worker's victim's frame.
func (h *Host) freeVictim(w *worker) {
	v := w.victim
	pg := &h.pages[v]
	pg.state = remote
	h.evictingN--
	h.release(v)
	h.stats.Evictions++
	h.sampleEviction(h.env.Now() - w.picked)
	w.victim = -1
	w.quota--
}

// written handles the acknowledgement of a write-back.
func (h *Host) written(r *request) {
	pg := &h.pages[r.page]
	pg.wb = false
	pg.version, pg.sum = r.version, r.sum
	h.stats.Writebacks++
	w := r.w
	if pg.state == evicting && w.victim == r.page {
		h.freeVictim(w)
	} else {
		w.victim = -1 // rescued while the write was in flight: keep it
	}
	h.step(w)
}

// pick returns a victim page, or -1.
func (h *Host) pick(now time.Duration) int32 {
	evictable := func(p int32) bool {
		pg := &h.pages[p]
		return pg.state == resident && pg.last <= now && !pg.wb
	}
	if h.cfg.Replacement == LRU {
		for p := h.tail; p >= 0; p = h.pages[p].prev {
			if evictable(p) {
				return p
			}
		}
		return -1
	}
	n := len(h.frames)
	for i := 0; i < 2*n+1; i++ {
		f := h.hand
		h.hand++
		if h.hand == n {
			h.hand = 0
		}
		p := h.frames[f]
		if p < 0 || !evictable(p) {
			continue
		}
		pg := &h.pages[p]
		if pg.ref {
			pg.ref = false
			continue
		}
		return p
	}
	return -1
}

// ---- LRU list ----

func (h *Host) lruPush(p int32) {
	pg := &h.pages[p]
	pg.prev, pg.next = -1, h.head
	if h.head >= 0 {
		h.pages[h.head].prev = p
	}
	h.head = p
	if h.tail < 0 {
		h.tail = p
	}
}

func (h *Host) lruUnlink(p int32) {
	pg := &h.pages[p]
	if pg.prev >= 0 {
		h.pages[pg.prev].next = pg.next
	} else if h.head == p {
		h.head = pg.next
	}
	if pg.next >= 0 {
		h.pages[pg.next].prev = pg.prev
	} else if h.tail == p {
		h.tail = pg.prev
	}
	pg.prev, pg.next = -1, -1
}

// ---- requests ----

func (h *Host) server(p int32) emulator.Addr {
	return h.cfg.Servers[(int(p)+h.cfg.Stripe)%len(h.cfg.Servers)]
}

// send sends a new request.
func (h *Host) send(r *request) {
	h.nextID++
	r.id = h.nextID
	r.rto = h.rto
	h.order = append(h.order, r)
	h.transmit(r, false)
}

// arm makes sure the retransmission timer fires by deadline due.
func (h *Host) arm(due time.Duration) {
	if h.rtoTimer != nil {
		if h.timerAt <= due {
			return
		}
		h.rtoTimer.Stop()
	}
	h.timerAt = due
	h.rtoTimer = h.env.After(due-h.env.Now(), h.tickFn)
}

// tick retransmits every request whose deadline has passed, in the order
// they were sent, and re-arms the timer for the next deadline.
func (h *Host) tick() {
	h.rtoTimer = nil
	now := h.env.Now()
	next := time.Duration(math.MaxInt64)
	for _, r := range h.order {
		if r.due <= now {
			r.retx++
			h.stats.Retransmits++
			r.rto = min(2*r.rto, h.cfg.RTOMax)
			h.rto = max(h.rto, r.rto/2) // remember the back-off, as TCP does
			h.transmit(r, true)
		}
		next = min(next, r.due)
	}
	if len(h.order) > 0 {
		h.arm(next)
	}
}

// newRequest returns a request holding r, reusing a spent one.
func (h *Host) newRequest(r request) *request {
	var p *request
	if k := len(h.freeReqs); k > 0 {
		p, h.freeReqs = h.freeReqs[k-1], h.freeReqs[:k-1]
	} else {
		p = new(request)
	}
	*p = r
	return p
}

// recycle takes back an answered request for newRequest.
func (h *Host) recycle(r *request) {
	*r = request{}
	h.freeReqs = append(h.freeReqs, r)
}

// inflight returns the outstanding request numbered id, or nil. A host
// has a few at a time (a read, and a write per reclaimer): a scan of them
// costs less than a map.
func (h *Host) inflight(id uint32) *request {
	for _, r := range h.order {
		if r.id == id {
			return r
		}
	}
	return nil
}

// complete removes an answered request.
func (h *Host) complete(r *request) {
	if i := slices.Index(h.order, r); i >= 0 {
		h.order = slices.Delete(h.order, i, i+1)
	}
}

func (h *Host) transmit(r *request, retx bool) {
	now := h.env.Now()
	r.sent = now
	hdr := farmem.Header{Type: r.typ, ID: r.id, Page: uint64(r.page), Version: r.version, Sum: r.sum}
	if retx {
		hdr.Flags |= farmem.FlagRetransmit
	}
	if r.typ == farmem.TypeWrite {
		h.st = h.State()
		hdr.Urgency = min(h.cfg.Marker.Urgency(&h.st), farmem.MaxUrgency)
		// The page is never built (the host keeps no page contents:
		// version v of page p is always the same bytes): its checksum
		// comes from its stamps (content.sum), and the header with the
		// head stamp, the host's body and the tail stamp go out as
		// parts, copied once, into the frame.
		head, tail := h.content.stamps(uint64(r.page), r.version)
		r.sum = h.content.sum(uint64(r.page), r.version)
		hdr.Sum = r.sum
		h.wbuf = append(hdr.Append(h.wbuf[:0], nil), head[:]...)
		h.tailStamp = tail
		emulator.SendParts(h.env, h.server(r.page), h.wbuf, h.content.middle(), h.tailStamp[:], &h.scratch)
	} else {
		h.wbuf = hdr.Append(h.wbuf[:0], nil)
		h.env.Send(h.server(r.page), h.wbuf)
	}
	r.due = now + r.rto
	h.arm(r.due)
}

// sampleRTT feeds the retransmission-timeout estimator (Karn: only requests
// never retransmitted).
func (h *Host) sampleRTT(d time.Duration) {
	if h.srtt == 0 {
		h.srtt, h.rttvar = d, d/2
	} else {
		h.rttvar = (3*h.rttvar + abs(h.srtt-d)) / 4
		h.srtt = (7*h.srtt + d) / 8
	}
	h.rto = min(max(h.srtt+4*h.rttvar, h.cfg.RTOMin), h.cfg.RTOMax)
}

// Recv implements emulator.Agent.
func (h *Host) Recv(from emulator.Addr, payload []byte) {
	hdr, data, err := farmem.Parse(payload)
	if err != nil || (hdr.Type != farmem.TypeData && hdr.Type != farmem.TypeAck) {
		h.integrity(fmt.Sprintf("malformed message from %v: %v", from, err))
		return
	}
	r := h.inflight(hdr.ID)
	if r == nil || uint64(r.page) != hdr.Page || (hdr.Type == farmem.TypeAck) != (r.typ == farmem.TypeWrite) {
		h.stats.Duplicates++
		return
	}
	if hdr.Type == farmem.TypeAck && hdr.Version != r.version {
		h.stats.Duplicates++
		return
	}
	h.complete(r)
	// Nothing refers to r once this callback is done: it serves a later
	// request.
	defer h.recycle(r)
	if r.retx == 0 {
		h.sampleRTT(h.env.Now() - r.sent)
	}
	if r.typ == farmem.TypeWrite {
		h.written(r)
		h.checkDone()
		return
	}
	pg := &h.pages[r.page]
	switch {
	case hdr.Flags&farmem.FlagNotFound != 0:
		h.integrity(fmt.Sprintf("page %d: the server has no copy (version %d was written)", r.page, pg.version))
	case hdr.Version != pg.version || hdr.Sum != pg.sum:
		h.integrity(fmt.Sprintf("page %d: got version %d (sum %08x), last written version %d (sum %08x)", r.page, hdr.Version, hdr.Sum, pg.version, pg.sum))
	case !h.content.matches(data, uint64(r.page), pg.version):
		h.integrity(fmt.Sprintf("page %d version %d: the data is not the version written", r.page, pg.version))
	}
	h.fetched(r.page, h.buf[h.pos].Write)
	h.checkDone()
}

func (h *Host) integrity(msg string) {
	h.stats.Integrity++
	if len(h.stats.IntegrityDetail) < 8 {
		h.stats.IntegrityDetail = append(h.stats.IntegrityDetail, msg)
	}
}

// RemotePages calls f for every page the host holds no frame for and has
// written to a server, with the version and checksum it last wrote, and
// the server it lives on.
func (h *Host) RemotePages(f func(page uint64, server emulator.Addr, version, sum uint32)) {
	for p := range h.pages {
		pg := &h.pages[p]
		if pg.state == remote {
			f(uint64(p), h.server(int32(p)), pg.version, pg.sum)
		}
	}
}

// CountIntegrityError records an integrity error found outside the host
// (the end-of-run comparison with the servers' copies).
func (h *Host) CountIntegrityError(msg string) { h.integrity(msg) }

// Addr is the host's address (valid after Start).
func (h *Host) Addr() netip.AddrPort { return h.env.Local() }

// LookupFunc finds a host's page on a memory server: its stored version,
// checksum and data.
type LookupFunc func(server, host emulator.Addr, page uint64) (version, sum uint32, data []byte, ok bool)

// CheckServers compares every page h holds only remotely with the servers'
// copies — the version h last wrote, its checksum, and data that matches
// the checksum — and counts each mismatch as an integrity error of h. It
// returns the number of mismatches. Run it when h is done.
func CheckServers(h *Host, lookup LookupFunc) int {
	bad := 0
	self := h.Addr()
	h.RemotePages(func(p uint64, server emulator.Addr, version, sum uint32) {
		v, s, data, ok := lookup(server, self, p)
		switch {
		case !ok:
			h.integrity(fmt.Sprintf("end of run: page %d (version %d) is missing on %v", p, version, server))
		case v != version || s != sum:
			h.integrity(fmt.Sprintf("end of run: page %d on %v is version %d (sum %08x), want %d (sum %08x)", p, server, v, s, version, sum))
		case checksum(data) != sum:
			h.integrity(fmt.Sprintf("end of run: page %d on %v does not match its checksum", p, server))
		default:
			return
		}
		bad++
	})
	return bad
}
