// Package freeina runs FreeINA with packets (docs/freeina.md): RDMA hosts
// — the soft-RoCE devices of emulator/roce, unmodified — training jobs
// whose workers all-reduce on FreeINA's two paths through switches
// running its data plane (p4/freeina), a controller that allocates switch
// memory per all-reduce through P4Runtime, and a check of the RC contract
// at every host. Chunks that fail on the INA path — sums that overflow the
// switch's 32 bits, connections that give up — are re-aggregated on the
// parameter-server path and the connections re-established (worker.go).
// The ina experiment kind (workloads/training) runs it for
// a policy of system freeina at granularity: packet, scaled, on either
// substrate (freeina-netns); the flow model runs FreeINA at paper scale.
package freeina

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tracebed/tracebed/emulator/roce"
	"github.com/tracebed/tracebed/emulator/roce/cm"
	"github.com/tracebed/tracebed/emulator/roce/wire"
	"github.com/tracebed/tracebed/emulator/testbed"
	dp "github.com/tracebed/tracebed/p4/freeina"
	sysfree "github.com/tracebed/tracebed/systems/freeina"
	"github.com/tracebed/tracebed/systems/inasched"
	jobtrace "github.com/tracebed/tracebed/traces/jobs"
	"github.com/tracebed/tracebed/traces/models"
	"github.com/tracebed/tracebed/workloads/training/fabric"
	"github.com/tracebed/tracebed/workloads/training/flow"
)

// Setup is one packet-level run.
type Setup struct {
	// Testbed runs p4/freeina on its switches.
	Testbed testbed.Testbed
	// Workers are the hosts jobs run on; Controller the controller's
	// host; PS the parameter-server hosts next to each switch (a job
	// takes one at its switch for its whole run).
	Workers    []string
	Controller string
	PS         map[string][]string
	// Net gives the turnaround, jitter, compute scale and the INA path's
	// payload (RDMAPayload).
	Net  fabric.Net
	Jobs []jobtrace.Job
	// Lookup finds a job's model (scaled profiles on a scaled run).
	Lookup func(name string) (models.Profile, bool)
	// Policy is an all-reduce-level scheduler (FreeINA's).
	Policy inasched.Factory
	Seed   uint64
	// Control is the hosts' path rule (zero: DefaultControl).
	Control sysfree.PathControl
	// Timeout is the RC local ACK timeout, rounded up to IBTA's codes
	// (0: 1 ms); Window the RNICs' requester window in packets (0:
	// 4096); Message the PS path's message bytes (0: 64 KiB).
	Timeout time.Duration
	Window  int
	Message int
	// Overflow is the share of chunks, drawn per round, whose gradients
	// span the whole int32 range so that their sum overflows the
	// switch's 32-bit registers (0: none; the gradients' values are below
	// 2^23 and 32 workers' sum fits). The switch flags those chunks and
	// the hosts re-aggregate them on the PS path, which sums in 64 bits.
	Overflow float64
	// Limit bounds the run's testbed time (0: 10 minutes).
	Limit time.Duration
	// Bins is the number of points of the memory series (0: 200).
	Bins     int
	Progress func(float64)
}

// Outcome is what a packet-level run measured: the flow model's metrics
// (times in the testbed's units) and the checks.
type Outcome struct {
	flow.Outcome
	// Rounds counts all-reduces, RoundsINA those on the INA path (their
	// every chunk aggregated in the switch).
	Rounds, RoundsINA int
	// Recovered counts the all-reduces begun on the INA path whose chunks
	// failed on it — sums the switch flagged as overflowed, results a
	// worker lacked when a connection gave up — and that the hosts
	// finished on the PS path (they count as PS-path all-reduces in
	// Rounds − RoundsINA); RecoveredChunks the chunks re-aggregated
	// there. GaveUp counts the INA connections whose retries ran out
	// (retry count exceeded) and Reconnected the INA connections
	// re-established (cm.Conn.Reconnect).
	Recovered, RecoveredChunks, GaveUp, Reconnected int
	// TookINA and TookPS are the all-reduces' times on each path, from
	// the controller's go to the last worker's done, in the order they
	// ended (a recovered all-reduce's with the PS path's).
	TookINA, TookPS []time.Duration
	// Violations of the RC contract seen at the hosts (0 in every
	// correct run), and the first.
	Violations int
	Violation  string
	// Devices sums the RNICs' counters.
	Devices roce.Counters
	// Switch sums the data plane's counters of every job.
	Switch SwitchCounters
}

// SwitchCounters are the data plane's counters of a run's jobs, summed.
type SwitchCounters struct {
	Packets, Results, Answers, Held uint64
	// Overflows counts the results whose sum overflowed (flagged).
	Overflows uint64
	Drops     [dp.NumJobDrops]uint64
}

// run is the shared, read-only part of a run (every host has it), and the
// flag that says the jobs are over.
type run struct {
	s           Setup
	k           int
	message     int
	timeoutCode uint8
	control     sysfree.PathControl
	ctlIP       netip.Addr
	hosts       []*host
	done        atomic.Bool

	mu   sync.Mutex
	sums map[[2]uint32]*lazySum // by job and round
}

// lazySum is a round's exact sum, computed by the first worker that needs
// it (workers of one job run on different goroutines on netns).
type lazySum struct {
	once sync.Once
	v    []int64
}

// sum returns job's exact sum of round r, computing it with f once.
func (r *run) sum(job uint32, round int, f func() []int64) []int64 {
	r.mu.Lock()
	if r.sums == nil {
		r.sums = map[[2]uint32]*lazySum{}
	}
	key := [2]uint32{job, uint32(round)}
	ls := r.sums[key]
	if ls == nil {
		ls = &lazySum{}
		r.sums[key] = ls
		// Rounds two behind every worker are checked: forget them.
		delete(r.sums, [2]uint32{job, uint32(round - 3)})
	}
	r.mu.Unlock()
	ls.once.Do(func() { ls.v = f() })
	return ls.v
}

func (r *run) finished() bool { return r.done.Load() }

// drawsOf returns a worker's compute time of every iteration: the flow
// model's draws for the job, so that both levels see the same phases.
func drawsOf(r *run, m ctlMsg, rank int) []time.Duration {
	j := r.s.Jobs[m.Job]
	d := flow.Draws(r.s.Seed, j.ID, int(m.N), int(m.Iterations), time.Duration(float64(m.Compute)*r.s.Net.ComputeScale), m.Jitter)
	return d[rank]
}

// timeoutCode is the IBTA local ACK timeout code of the shortest timeout
// not below d.
func timeoutCode(d time.Duration) uint8 {
	for t := uint8(1); t < 32; t++ {
		if wire.AckTimeout(t) >= d {
			return t
		}
	}
	return 31
}

// Run runs the jobs on the testbed and checks them: every all-reduced sum
// exact, the RC contract kept at every host.
func Run(ctx context.Context, s Setup) (*Outcome, error) {
	if s.Lookup == nil {
		s.Lookup = models.Lookup
	}
	if s.Control == (sysfree.PathControl{}) {
		s.Control = sysfree.DefaultControl
	}
	if err := s.Control.Check(); err != nil {
		return nil, err
	}
	if s.Timeout == 0 {
		s.Timeout = time.Millisecond
	}
	if s.Window == 0 {
		s.Window = 4096
	}
	if s.Message == 0 {
		s.Message = 64 << 10
	}
	if s.Limit == 0 {
		s.Limit = 10 * time.Minute
	}
	if s.Bins == 0 {
		s.Bins = 200
	}
	if !(s.Overflow >= 0 && s.Overflow <= 1) {
		return nil, fmt.Errorf("overflow share %v: want 0 to 1", s.Overflow)
	}
	payload := s.Net.RDMAPayload
	if payload == 0 {
		payload = fabric.DefaultRDMAPayload
	}
	if len(s.Jobs) == 0 {
		return nil, errors.New("no jobs")
	}
	top := s.Testbed.Topology()
	r := &run{s: s, k: payload / 4, message: s.Message, timeoutCode: timeoutCode(s.Timeout), control: s.Control}
	if n := top.Node(s.Controller); n == nil || !n.IsHost() {
		return nil, fmt.Errorf("controller host %q is not a host of %s", s.Controller, top.Name)
	} else {
		r.ctlIP = n.IP
	}
	names := append([]string{s.Controller}, s.Workers...)
	for _, hs := range s.PS {
		names = append(names, hs...)
	}
	seen := map[string]bool{}
	for _, name := range names {
		if seen[name] {
			continue
		}
		seen[name] = true
		n := top.Node(name)
		if n == nil || !n.IsHost() {
			return nil, fmt.Errorf("%q is not a host of %s", name, top.Name)
		}
		h := &host{run: r, name: name, ip: n.IP, handlers: map[uint32]func(roce.Completion){}, ps: map[uint32]*psJob{}}
		dev, err := roce.NewDevice(roce.Config{MTU: 4096, Window: s.Window, OnStart: h.start})
		if err != nil {
			return nil, err
		}
		h.dev = dev
		h.mgr = cm.New(dev, cm.Config{Timeout: 5 * time.Millisecond, Retries: 40})
		if name == s.Controller {
			if h.boss, err = newController(h, r); err != nil {
				return nil, err
			}
		}
		r.hosts = append(r.hosts, h)
	}
	for _, h := range r.hosts {
		env, err := cm.AttachWith(s.Testbed, h.name, h.dev, h.mgr, tap{h})
		if err != nil {
			return nil, err
		}
		h.env = env
	}
	boss := r.hosts[0]
	done := func() bool {
		var fin, fail bool
		var frac float64
		for _, h := range r.hosts {
			s.Testbed.Inspect(h.env, func() {
				fail = fail || h.failed != nil
				if h == boss {
					fin = h.boss.done == len(h.boss.jobs)
					frac = float64(h.boss.rounds)
				}
			})
		}
		if s.Progress != nil {
			total := 0
			for _, j := range s.Jobs {
				total += j.Iterations
			}
			s.Progress(frac / float64(max(1, total)))
		}
		return fin || fail
	}
	runErr := s.Testbed.Run(ctx, time.Millisecond, s.Limit, done)
	r.done.Store(true)
	if err := s.Testbed.Close(); err != nil {
		return nil, err
	}
	var errs []error
	for _, h := range r.hosts {
		if h.failed != nil {
			errs = append(errs, h.failed)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if runErr != nil {
		c := boss.boss
		return nil, fmt.Errorf("%d of %d jobs done, %d all-reduces (%s): %w", c.done, len(c.jobs), c.rounds, r.status(), runErr)
	}
	return r.outcome()
}

// outcome gathers the results once the testbed is closed.
func (r *run) outcome() (*Outcome, error) {
	c := r.hosts[0].boss
	o := &Outcome{Rounds: c.rounds, RoundsINA: c.byPath[pathINA], TookINA: c.took[pathINA], TookPS: c.took[pathPS],
		Recovered: c.recovered, RecoveredChunks: c.recoveredChunks}
	for _, h := range r.hosts {
		o.GaveUp += h.giveUps
		o.Reconnected += h.reconnects
		o.Violations += h.checkEr
		if o.Violation == "" {
			o.Violation = h.firstEr
		}
		dc := h.dev.Counters()
		o.Devices.TxPackets += dc.TxPackets
		o.Devices.RxPackets += dc.RxPackets
		o.Devices.Retransmitted += dc.Retransmitted
		o.Devices.Timeouts += dc.Timeouts
		o.Devices.SeqNAKsSent += dc.SeqNAKsSent
		o.Devices.Duplicates += dc.Duplicates
		o.Devices.CompletionsErr += dc.CompletionsErr
		for i, d := range dc.Drops {
			o.Devices.Drops[i] += d
		}
	}
	var grad, ina float64
	first := math.Inf(1)
	for _, j := range c.jobs {
		o.Jobs = append(o.Jobs, j.res)
		first = min(first, j.res.Arrival)
		if j.spec.Workers > 1 {
			grad += j.res.Gradient
			ina += j.res.INA
		}
		o.FallbackBytes += j.res.Fallback
	}
	o.Makespan = c.last - first
	if grad > 0 {
		o.INAFraction = ina / grad
	}
	if c.memSum > 0 && o.Makespan > 0 {
		o.MemUtil = c.area / (float64(c.memSum) * o.Makespan)
	}
	o.MemSeries = flow.BinSteps(c.steps, first, c.last, r.s.Bins)
	o.Switch = c.sw
	if o.Violations > 0 {
		return o, fmt.Errorf("%d violations of the RC contract; the first: %s", o.Violations, o.Violation)
	}
	return o, nil
}

// status describes where the hosts are (for a run that did not finish).
func (r *run) status() string {
	var out []string
	for _, h := range r.hosts {
		if w := h.worker; w != nil {
			st := fmt.Sprintf("%s: job %d round %d path %d, %d results, %d posted, %d acked, sent %v", h.name, w.job, w.round, w.path, w.got, w.next, w.acked, w.sent)
			if w.stopped {
				st += ", INA part stopped"
			}
			if rec := w.rec; rec != nil {
				st += fmt.Sprintf(", recovering round %d: %d of %d chunks posted, %d acked, %d sums in", rec.round, rec.next, len(rec.chunks), rec.acked, rec.got)
			}
			if w.reconnecting {
				st += ", INA connection out re-establishing"
			}
			if w.inaOut != nil {
				st += fmt.Sprintf(", INA send queue %d", w.inaOut.QP.SendQueued())
			}
			if w.inaIn != nil {
				st += fmt.Sprintf(", INA receives %d", w.inaIn.QP.RecvQueued())
			}
			if w.ps != nil {
				st += fmt.Sprintf(", PS send queue %d", w.ps.QP.SendQueued())
			}
			st += fmt.Sprintf(", device %+v", h.dev.Counters())
			out = append(out, st)
		}
		for _, p := range h.ps {
			out = append(out, fmt.Sprintf("%s: PS of job %d round %d, %d sums out", h.name, p.job, p.round, p.sent))
		}
	}
	return strings.Join(out, "; ")
}
