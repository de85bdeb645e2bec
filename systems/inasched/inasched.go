// Package inasched is the common frame of tracebed's multi-tenant INA job
// schedulers (systems/noina, switchml, atp, dynaina): what a scheduler is
// told about jobs, what it decides (a Binding of each job to switch
// aggregator memory), and the Controller that carries its decisions to the
// switches through P4Runtime.
//
// A scheduler never touches packets or time: the substrate (the flow-level
// model or the packet-level emulation in workloads/training) calls Admit
// when a job starts, Binding at every iteration boundary before the job's
// all-reduce, and Depart when it finishes. Decisions take effect at the next
// iteration boundary of the job concerned, so no in-flight aggregation is
// ever lost (DESIGN.md §5).
package inasched

import (
	"fmt"
	"math"
	"time"
)

// Job is what a scheduler knows of a running job: its profile and the
// network-derived quantities it needs for decisions.
type Job struct {
	ID      int
	Model   string
	Workers int
	// Switch is the aggregation switch: the ToR for a rack-local job; for
	// a job across racks the switch where the partial sums of its racks
	// meet (a spine). Lower lists the switches below it that aggregate a
	// rack's contributions first (two-level aggregation; empty for a
	// rack-local job). A binding holds the same aggregator range on every
	// switch of the job.
	Switch  string
	Lower   []string
	Arrival time.Duration
	// Compute is the compute time of one iteration.
	Compute time.Duration
	// Gradient is the bytes each worker all-reduces per iteration.
	Gradient int64
	// CommINA is the all-reduce time of one iteration at full INA rate
	// (the job alone, with Demand aggregators); CommRing the host ring
	// all-reduce time alone.
	CommINA, CommRing time.Duration
	// Demand is the aggregators that let the job aggregate at line rate
	// (its bandwidth-delay product in window slots, times the aggregators
	// per slot). Useful is the fewest aggregators with which INA is
	// faster than the host ring; below it a pool is worse than none. When
	// INA is no faster than the ring even at Demand, Useful is above
	// Demand: the job should never get memory.
	Demand, Useful int
	// Latency is the INA round trip (a slot's packet out to its result
	// back): the fixed part of CommINA.
	Latency time.Duration
	// CommPS is the all-reduce time in shared mode (ATP: results through
	// the parameter server) with DemandPS aggregators, the window that
	// keeps that longer round trip, LatencyPS, at line rate; no collisions.
	CommPS    time.Duration
	DemandPS  int
	LatencyPS time.Duration
	// FreeINA (RDMA): CommRDMA is the all-reduce time on the INA path —
	// RC connections between the workers, aggregated in the switch —
	// with DemandRDMA aggregators (its line-rate window, in aggregators
	// of the topology's unit), LatencyRDMA its round trip; UsefulRDMA the
	// fewest aggregators with which that path beats the job's
	// parameter-server path, whose all-reduce takes CommPSPath (RC
	// connections to a parameter server that aggregates in software).
	CommRDMA, LatencyRDMA, CommPSPath time.Duration
	DemandRDMA, UsefulRDMA            int
	// SlotRDMA is the aggregators one slot of the INA path takes (a
	// packet's values over the topology's 64-value aggregators).
	SlotRDMA int
}

// windowed is the time of an all-reduce over a window of size slots when
// demand slots keep it at line rate: the streaming part slows in
// proportion below demand.
func windowed(comm, latency time.Duration, demand, size int) time.Duration {
	if size <= 0 {
		return time.Duration(math.MaxInt64)
	}
	if size >= demand {
		return comm
	}
	return time.Duration(float64(comm-latency)*float64(demand)/float64(size)) + latency
}

// INATime estimates the job's all-reduce time over a pool of size
// aggregators (pool mode, the job alone).
func (j Job) INATime(size int) time.Duration { return windowed(j.CommINA, j.Latency, j.Demand, size) }

// SharedTime estimates the job's all-reduce time in shared mode over a
// pool of size aggregators (ATP: its window is at most the pool), without
// collisions.
func (j Job) SharedTime(size int) time.Duration {
	return windowed(j.CommPS, j.LatencyPS, j.DemandPS, size)
}

// PoolUseful reports whether a pool of size aggregators makes the job's
// all-reduce faster than the ring (size at least Useful).
func (j Job) PoolUseful(size int) bool {
	return j.Distributed() && j.Useful <= j.Demand && size >= j.Useful
}

// SharedUseful reports whether shared mode over size aggregators makes the
// job's all-reduce no slower than the ring, collisions aside.
func (j Job) SharedUseful(size int) bool { return j.Distributed() && j.SharedTime(size) <= j.CommRing }

// RDMATime estimates the job's all-reduce time on FreeINA's INA path
// over size aggregators (the job alone).
func (j Job) RDMATime(size int) time.Duration {
	return windowed(j.CommRDMA, j.LatencyRDMA, j.DemandRDMA, size)
}

// Switches returns every switch the job aggregates on: Switch, then
// Lower.
func (j Job) Switches() []string {
	if len(j.Lower) == 0 {
		return []string{j.Switch}
	}
	return append([]string{j.Switch}, j.Lower...)
}

// Period is the length of one iteration at full INA rate.
func (j Job) Period() time.Duration { return j.Compute + j.CommINA }

// CommFraction is the share of an iteration spent communicating at full INA
// rate: the probability that the job is communicating at a random instant.
func (j Job) CommFraction() float64 {
	if j.Period() <= 0 {
		return 0
	}
	return j.CommINA.Seconds() / j.Period().Seconds()
}

// Intensity is the job's communication intensity: gradient bytes per second
// of compute.
func (j Job) Intensity() float64 {
	if j.Compute <= 0 {
		return float64(j.Gradient) * 1e9
	}
	return float64(j.Gradient) / j.Compute.Seconds()
}

// Distributed reports whether the job all-reduces at all (more than one
// worker).
func (j Job) Distributed() bool { return j.Workers > 1 }

// Mode is how a job all-reduces.
type Mode int

// Modes of a Binding.
const (
	// Ring: host ring all-reduce, no switch memory.
	Ring Mode = iota
	// Pool: SwitchML-style streaming aggregation over the aggregators
	// [Base, Base+Size) of the switch. The job uses the whole range while
	// it communicates; jobs bound to the same Pool take turns (one
	// communication phase at a time, the rest wait).
	Pool
	// Shared: ATP-style aggregation with the aggregator chosen by hash
	// over [Base, Base+Size); a chunk whose aggregator is held by another
	// chunk falls back to the job's parameter server.
	Shared
	// RDMA: FreeINA's INA path: the workers' RDMA reliable connections
	// aggregated in the switch over the aggregators [Base, Base+Size),
	// granted for one all-reduce (see AllReduceScheduler).
	RDMA
	// PS: FreeINA's parameter-server path: RDMA reliable connections to
	// the job's parameter server, which aggregates in software; no
	// switch memory.
	PS
)

func (m Mode) String() string {
	switch m {
	case Ring:
		return "ring"
	case Pool:
		return "pool"
	case Shared:
		return "shared"
	case RDMA:
		return "rdma"
	case PS:
		return "ps"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Binding is a job's use of switch memory for its next all-reduce.
type Binding struct {
	Mode Mode
	// Pool identifies the memory pool; jobs with the same Pool on the same
	// switch take turns. It is meaningful for Mode Pool only.
	Pool int
	// Base and Size delimit the aggregators, in the switch's aggregator
	// array.
	Base, Size int
}

// RingBinding is the binding of a job without switch memory.
var RingBinding = Binding{Mode: Ring, Pool: -1}

// INA reports whether the binding aggregates in the switch.
func (b Binding) INA() bool { return b.Mode != Ring && b.Mode != PS && b.Size > 0 }

// Overlaps reports whether two bindings share aggregators.
func (b Binding) Overlaps(o Binding) bool {
	return b.INA() && o.INA() && b.Base < o.Base+o.Size && o.Base < b.Base+b.Size
}

func (b Binding) String() string {
	if b.Mode == PS {
		return "ps"
	}
	if !b.INA() {
		return "ring"
	}
	return fmt.Sprintf("%s %d [%d,%d)", b.Mode, b.Pool, b.Base, b.Base+b.Size)
}

// Scheduler is a multi-tenant INA policy. Its methods are called from one
// goroutine, in time order.
type Scheduler interface {
	// Name is the policy's name ("dynaina").
	Name() string
	// Admit tells the scheduler that job j has started (its workers are
	// placed and it is about to compute its first iteration).
	Admit(now time.Duration, j Job)
	// Depart tells the scheduler that job id has finished; its memory is
	// free from now on.
	Depart(now time.Duration, id int)
	// Binding returns the binding job id uses for the all-reduce that
	// starts now (an iteration boundary). Bindings of jobs in different
	// pools on the same switch never overlap; a job whose binding changed
	// moves to the new one now.
	Binding(now time.Duration, id int) Binding
	// Priority orders jobs that wait for the same pool: the higher goes
	// first; ties go to the one that asked first.
	Priority(id int) float64
}

// AllReduceScheduler is a scheduler that allocates switch memory per
// all-reduce (FreeINA): the substrate asks for a job's binding when its
// all-reduce starts — every worker ready, the hosts requesting memory —
// rather than at the job's first worker's iteration boundary, and tells
// the scheduler when the all-reduce ends, when the memory is free again.
// So a job holds no memory while it computes or waits for its slowest
// worker.
type AllReduceScheduler interface {
	Scheduler
	// End is the end of job id's all-reduce: every worker holds its
	// result and every packet of it is acknowledged.
	End(now time.Duration, id int)
}

// Memory is the aggregator capacity of every switch, by switch name.
type Memory map[string]int

// Factory builds a scheduler for a network with the given switch memory and
// aggregators per window slot.
type Factory func(mem Memory, slotAggregators int) (Scheduler, error)
