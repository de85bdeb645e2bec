// Package switchml is the isolation baseline: SwitchML-style static
// partitioning of switch aggregator memory among tenants.
//
// Each switch's memory is split into fixed, equal partitions when the run
// starts. A job takes a free partition of its aggregation switch when it
// starts and keeps it until it finishes — through its compute phases too,
// when the partition is reserved but idle. A job that finds no free
// partition all-reduces with the host ring until one frees; freed partitions
// go to waiting jobs in the order they started. The job moves onto the
// partition at its next iteration boundary.
package switchml

import (
	"fmt"
	"slices"
	"time"

	"github.com/tracebed/tracebed/systems/inasched"
)

// Params configure the partitioning.
type Params struct {
	// Partition is the target size of one partition in aggregators. Each
	// switch with M aggregators gets max(1, ⌊M/Partition⌋) equal
	// partitions (the remainder of the division is spread over them).
	// 0 in a spec means the network's line-rate window
	// (inasched.Network.Window).
	Partition int `yaml:"partition"`
}

// Check implements inasched.Params.
func (p *Params) Check() error {
	if p.Partition < 0 {
		return inasched.ParamErrorf("partition", "%d; want a positive number of aggregators, or 0 for the network's line-rate window", p.Partition)
	}
	return nil
}

// Factory implements inasched.Params.
func (p *Params) Factory(n inasched.Network) (inasched.Factory, error) {
	q := *p
	if q.Partition == 0 {
		q.Partition = n.Window()
	}
	if q.Partition <= 0 {
		return nil, fmt.Errorf("switchml: the network gives a window of %d aggregators", q.Partition)
	}
	return Factory(q), nil
}

// Register adds the SwitchML policy to r.
func Register(r *inasched.Registry) error {
	return r.Register(inasched.Policy{Name: "switchml", Doc: "isolation: static equal partitions, held by a job from start to finish",
		Params: func() inasched.Params { return &Params{} }})
}

// Scheduler is the SwitchML isolation policy.
type Scheduler struct {
	p        Params
	switches map[string]*swState
	jobs     map[int]*jobState
	waiting  []int // job ids without a partition, in start order
}

type swState struct {
	size  int   // aggregators per partition
	owner []int // job id per partition, -1 free
}

type jobState struct {
	job       inasched.Job
	partition int // -1: none
}

// New returns a SwitchML scheduler for the given memory.
func New(p Params, mem inasched.Memory, slotAggregators int) (*Scheduler, error) {
	if p.Partition <= 0 {
		return nil, fmt.Errorf("switchml: partition must be positive, got %d", p.Partition)
	}
	s := &Scheduler{p: p, switches: map[string]*swState{}, jobs: map[int]*jobState{}}
	for name, m := range mem {
		st := &swState{}
		if m > 0 {
			n := max(1, m/p.Partition)
			st.size = m / n
			if slotAggregators > 1 {
				st.size -= st.size % slotAggregators
			}
			if st.size > 0 {
				st.owner = slices.Repeat([]int{-1}, n)
			}
		}
		s.switches[name] = st
	}
	return s, nil
}

// Factory returns an inasched.Factory for params p.
func Factory(p Params) inasched.Factory {
	return func(mem inasched.Memory, slot int) (inasched.Scheduler, error) { return New(p, mem, slot) }
}

// Name implements inasched.Scheduler.
func (s *Scheduler) Name() string { return "switchml" }

// Partitions returns the number and size of the partitions of a switch.
func (s *Scheduler) Partitions(sw string) (n, size int) {
	st := s.switches[sw]
	if st == nil {
		return 0, 0
	}
	return len(st.owner), st.size
}

// free returns the lowest partition index free on every switch of j whose
// range on j's top switch lies inside that partition on every other
// switch, or -1.
func (s *Scheduler) free(j inasched.Job) int {
	top := s.switches[j.Switch]
	if top == nil {
		return -1
	}
next:
	for i, o := range top.owner {
		if o != -1 {
			continue
		}
		lo, hi := i*top.size, (i+1)*top.size
		for _, sw := range j.Lower {
			st := s.switches[sw]
			if st == nil || i >= len(st.owner) || st.owner[i] != -1 || lo < i*st.size || hi > (i+1)*st.size {
				continue next
			}
		}
		return i
	}
	return -1
}

// take gives partition i to job js on every switch of its tree.
func (s *Scheduler) take(js *jobState, i int) {
	js.partition = i
	for _, sw := range js.job.Switches() {
		s.switches[sw].owner[i] = js.job.ID
	}
}

// Admit implements inasched.Scheduler. A job for which a partition would
// not beat the host ring (the estimate: a partition below its Useful
// size) stays on the ring and never waits for one.
func (s *Scheduler) Admit(_ time.Duration, j inasched.Job) {
	js := &jobState{job: j, partition: -1}
	s.jobs[j.ID] = js
	st := s.switches[j.Switch]
	if !j.Distributed() || st == nil || st.size == 0 || !j.PoolUseful(st.size) {
		return
	}
	if i := s.free(j); i >= 0 {
		s.take(js, i)
		return
	}
	s.waiting = append(s.waiting, j.ID)
}

// Depart implements inasched.Scheduler: the job's partition goes to the
// longest-waiting job that can use it.
func (s *Scheduler) Depart(_ time.Duration, id int) {
	js := s.jobs[id]
	if js == nil {
		return
	}
	delete(s.jobs, id)
	s.waiting = slices.DeleteFunc(s.waiting, func(w int) bool { return w == id })
	if js.partition < 0 {
		return
	}
	for _, sw := range js.job.Switches() {
		s.switches[sw].owner[js.partition] = -1
	}
	for k := 0; k < len(s.waiting); k++ {
		w := s.jobs[s.waiting[k]]
		if i := s.free(w.job); i >= 0 {
			s.take(w, i)
			s.waiting = slices.Delete(s.waiting, k, k+1)
			k--
		}
	}
}

// Binding implements inasched.Scheduler.
func (s *Scheduler) Binding(_ time.Duration, id int) inasched.Binding {
	js := s.jobs[id]
	if js == nil || js.partition < 0 {
		return inasched.RingBinding
	}
	size := s.switches[js.job.Switch].size
	return inasched.Binding{Mode: inasched.Pool, Pool: js.partition, Base: js.partition * size, Size: size}
}

// Priority implements inasched.Scheduler; partitions are never shared.
func (s *Scheduler) Priority(int) float64 { return 0 }
