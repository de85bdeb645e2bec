package freeina

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/emulator/roce/wire"
	dp "github.com/tracebed/tracebed/p4/freeina"
	"github.com/tracebed/tracebed/systems/inasched"
	"github.com/tracebed/tracebed/topologies"
)

// P4RT is the binder of FreeINA's data plane (p4/freeina): it installs a
// job's ring of connections on its switch when the job is first granted
// memory, writes the binding of every all-reduce (its slots, chunks and
// the connections' PSNs of chunk 0) when the hosts are granted memory,
// deletes it when the all-reduce ends (End), and retires the ring when
// the job leaves or takes the PS path (Unbind): it stays installed, its
// late packets dropped, until its switch job id is needed again. Trace job ids are mapped
// onto the switch's job ids (0 to dp.MaxJobs−1), handed out and taken
// back as jobs come and go.
type P4RT struct {
	// Ring, when set, returns the connections of job's ring (its worker
	// hosts in rank order): the receivers' queue pairs and regions, which
	// the hosts report. By default a ring of made-up queue pairs and
	// regions, for runs without hosts (the flow model), whose bindings
	// the data plane checks all the same.
	Ring func(job int, workers []string) ([]dp.Link, error)
	// Round returns the chunks of job's next all-reduce and the PSN of
	// chunk 0 of each worker's connection (the hosts report them with
	// their request). By default: Chunks, and PSNs 0.
	Round func(job int) (chunks uint32, psn []uint32, err error)
	// Chunks is the default Round's chunks of a job.
	Chunks func(job int) uint32
	// Slot is the aggregators (of the topology's 64 values) one slot of
	// the switches' data plane takes: its k values per packet ÷ 64.
	Slot int

	top  *topologies.Topology
	ctl  map[string]*dp.Controller
	sw   map[string]*swJobs
	gens uint32
}

type swJobs struct {
	ids   map[int]uint16 // trace job → switch job id, while its ring is installed
	rings map[int]dp.Ring
	free  []uint16
	next  uint16
	bound map[int]bool // an all-reduce binding is installed
	// retired marks the rings of jobs unbound (gone, or on the PS path):
	// they stay installed, so that the switch still knows their late
	// packets — duplicates, retransmissions — and drops them (no
	// binding) instead of forwarding a worker's raw contribution to its
	// successor, whose RNIC might take a duplicate WRITE's payload. A
	// retired ring is removed when its switch job id is needed, or when
	// more than maxRetired are kept (the oldest first).
	retired map[int]bool
	order   []int // retired jobs, oldest first
}

// maxRetired bounds the retired rings a switch keeps (their connections
// hold entries of the conns table): late packets come within round trips
// of a job's last all-reduce, while other jobs come and go.
const maxRetired = 16

var _ inasched.AllReduceBinder = (*P4RT)(nil)

// NewP4RT returns a binder for the switches of top behind clients (one
// per switch with memory, by name).
func NewP4RT(top *topologies.Topology, clients map[string]p4rt.Client) (*P4RT, error) {
	b := &P4RT{top: top, ctl: map[string]*dp.Controller{}, sw: map[string]*swJobs{}, Slot: SlotAggregatorsFor(dp.DefaultK)}
	for name, c := range clients {
		ctl, err := dp.NewController(c)
		if err != nil {
			return nil, fmt.Errorf("switch %s: %w", name, err)
		}
		b.ctl[name] = ctl
		b.sw[name] = &swJobs{ids: map[int]uint16{}, rings: map[int]dp.Ring{}, bound: map[int]bool{}, retired: map[int]bool{}}
	}
	return b, nil
}

// SwitchJob returns the switch job id of trace job job on sw, while its
// ring is installed.
func (b *P4RT) SwitchJob(sw string, job int) (uint16, bool) {
	s := b.sw[sw]
	if s == nil {
		return 0, false
	}
	id, ok := s.ids[job]
	return id, ok
}

// SlotAggregatorsFor is the aggregators (of the topology's 64 values) one
// slot of k values takes.
func SlotAggregatorsFor(k int) int { return max(1, k/64) }

// Bind is BindCall run at once, for callers that may block (tests,
// drivers): the switch holds the binding when it returns.
func (b *P4RT) Bind(ctx context.Context, j inasched.Job, bd inasched.Binding, workers []string) error {
	call, err := b.BindCall(j, bd, workers)
	if err != nil {
		return err
	}
	return inasched.Run(ctx, call)
}

// End is EndCall run at once.
func (b *P4RT) End(ctx context.Context, j inasched.Job) error {
	call, err := b.EndCall(j)
	if err != nil {
		return err
	}
	return inasched.Run(ctx, call)
}

// Unbind is UnbindCall run at once.
func (b *P4RT) Unbind(ctx context.Context, j inasched.Job) error {
	call, err := b.UnbindCall(j)
	if err != nil {
		return err
	}
	return inasched.Run(ctx, call)
}

// BindCall implements inasched.Binder: the job's memory for its next
// all-reduce.
func (b *P4RT) BindCall(j inasched.Job, bd inasched.Binding, workers []string) (inasched.Call, error) {
	sw, job := j.Switch, j.ID
	ctl, s := b.ctl[sw], b.sw[sw]
	switch {
	case len(j.Lower) > 0:
		return nil, fmt.Errorf("job %d spans racks (%v); FreeINA's data plane aggregates a rack's ring at its ToR", job, j.Switches())
	case ctl == nil:
		return nil, fmt.Errorf("switch %s has no P4Runtime client", sw)
	case bd.Mode != inasched.RDMA:
		return nil, fmt.Errorf("job %d: a %v binding is not FreeINA's data plane's to run", job, bd.Mode)
	case b.Slot < 1 || bd.Base%b.Slot != 0 || bd.Size%b.Slot != 0:
		return nil, fmt.Errorf("job %d: aggregators [%d, %d) are not whole slots of %d", job, bd.Base, bd.Base+bd.Size, b.Slot)
	case len(workers) < 2 || len(workers) > dp.MaxWorkers:
		return nil, fmt.Errorf("job %d: %d workers; FreeINA's data plane aggregates 2 to %d", job, len(workers), dp.MaxWorkers)
	}
	var calls []inasched.Call
	id, ok := s.ids[job]
	delete(s.retired, job) // its ring, if kept, serves again
	if !ok {
		links, err := b.ring(job, workers)
		if err != nil {
			return nil, err
		}
		switch {
		case len(s.free) > 0:
			id, s.free = s.free[len(s.free)-1], s.free[:len(s.free)-1]
		case int(s.next) < dp.MaxJobs:
			id = s.next
			s.next++
		default:
			var call inasched.Call
			if id, call, err = b.reclaim(sw); err != nil {
				return nil, err
			}
			calls = append(calls, call)
		}
		// A retired ring with one of these connections (a queue pair
		// number used again) gives way.
		calls = append(calls, b.clear(sw, links))
		r := dp.Ring{Job: id, Group: id + 1, Links: links}
		top := b.top
		calls = append(calls, func(ctx context.Context) error { return ctl.AddRing(ctx, top, sw, r) })
		s.ids[job], s.rings[job] = id, r
	}
	chunks, psn, err := b.round(job, len(workers))
	if err != nil {
		return nil, err
	}
	b.gens++
	if b.gens == 0 {
		b.gens = 1
	}
	bind := dp.Binding{Job: id, Gen: b.gens, Base: uint32(bd.Base / b.Slot), Size: uint32(bd.Size / b.Slot),
		Chunks: chunks, Workers: uint8(len(workers)), Group: id + 1}
	calls = append(calls, func(ctx context.Context) error { return ctl.Bind(ctx, bind, psn) })
	s.bound[job] = true
	return inasched.Sequence(calls...), nil
}

func (b *P4RT) ring(job int, workers []string) ([]dp.Link, error) {
	if b.Ring != nil {
		return b.Ring(job, workers)
	}
	links := make([]dp.Link, len(workers))
	for i, w := range workers {
		src, dst := b.top.Node(w), b.top.Node(workers[(i+1)%len(workers)])
		if src == nil || dst == nil || !src.IsHost() || !dst.IsHost() {
			return nil, fmt.Errorf("job %d: workers %q and %q are not both hosts", job, w, workers[(i+1)%len(workers)])
		}
		links[i] = dp.Link{Src: src.IP, Dst: dst.IP, Sport: wire.Port, QPN: 0x1000 + uint32(i), RKey: 0x100 + uint32(i),
			VA: uint64(i+1) << 32}
	}
	return links, nil
}

func (b *P4RT) round(job, workers int) (uint32, []uint32, error) {
	if b.Round != nil {
		return b.Round(job)
	}
	chunks := uint32(1)
	if b.Chunks != nil {
		chunks = max(1, b.Chunks(job))
	}
	return chunks, make([]uint32, workers), nil
}

// EndCall implements inasched.AllReduceBinder: the all-reduce's binding
// is deleted; the ring stays for the job's next one.
func (b *P4RT) EndCall(j inasched.Job) (inasched.Call, error) {
	sw, job := j.Switch, j.ID
	ctl, s := b.ctl[sw], b.sw[sw]
	if ctl == nil {
		return nil, fmt.Errorf("switch %s has no P4Runtime client", sw)
	}
	if !s.bound[job] {
		return nil, nil
	}
	delete(s.bound, job)
	id := s.ids[job]
	return func(ctx context.Context) error { return ctl.Unbind(ctx, id) }, nil
}

// UnbindCall implements inasched.Binder: the job's binding, if any, is
// removed and its ring retired (kept installed until its switch job id is
// needed, see swJobs.retired).
func (b *P4RT) UnbindCall(j inasched.Job) (inasched.Call, error) {
	end, err := b.EndCall(j)
	if err != nil {
		return nil, err
	}
	calls := []inasched.Call{end}
	s := b.sw[j.Switch]
	if _, ok := s.ids[j.ID]; ok && !s.retired[j.ID] {
		s.retired[j.ID] = true
		s.order = append(s.order, j.ID)
	}
	for len(s.retired) > maxRetired {
		id, call, err := b.reclaim(j.Switch)
		if err != nil {
			return nil, err
		}
		calls = append(calls, call)
		s.free = append(s.free, id)
	}
	return inasched.Sequence(calls...), nil
}

// clear plans the removal of the retired rings on sw that hold a
// connection of links (the conns table's key: source, destination, queue
// pair), freeing their switch job ids.
func (b *P4RT) clear(sw string, links []dp.Link) inasched.Call {
	s := b.sw[sw]
	type key struct {
		src, dst netip.Addr
		qpn      uint32
	}
	want := map[key]bool{}
	for _, l := range links {
		want[key{l.Src, l.Dst, l.QPN}] = true
	}
	var calls []inasched.Call
	for _, job := range slices.Clone(s.order) {
		if !s.retired[job] {
			continue
		}
		clash := false
		for _, l := range s.rings[job].Links {
			clash = clash || want[key{l.Src, l.Dst, l.QPN}]
		}
		if !clash {
			continue
		}
		id, call := b.remove(sw, job)
		calls = append(calls, call)
		s.free = append(s.free, id)
		s.order = slices.DeleteFunc(s.order, func(jb int) bool { return jb == job })
	}
	return inasched.Sequence(calls...)
}

// remove plans the removal of a retired ring of job from sw and returns
// its switch job id.
func (b *P4RT) remove(sw string, job int) (uint16, inasched.Call) {
	s := b.sw[sw]
	ctl, top, r := b.ctl[sw], b.top, s.rings[job]
	id := s.ids[job]
	delete(s.ids, job)
	delete(s.rings, job)
	delete(s.retired, job)
	return id, func(ctx context.Context) error { return ctl.RemoveRing(ctx, top, sw, r) }
}

// reclaim plans the removal of the oldest retired ring on sw and returns
// its switch job id.
func (b *P4RT) reclaim(sw string) (uint16, inasched.Call, error) {
	s := b.sw[sw]
	// Jobs bound again since they retired are no longer retired.
	s.order = slices.DeleteFunc(s.order, func(jb int) bool { return !s.retired[jb] })
	if len(s.order) == 0 {
		return 0, nil, fmt.Errorf("switch %s: more than %d jobs at once", sw, dp.MaxJobs)
	}
	job := s.order[0]
	s.order = s.order[1:]
	id, call := b.remove(sw, job)
	return id, call, nil
}

// Controller returns the data-plane controller of a switch.
func (b *P4RT) Controller(sw string) *dp.Controller { return b.ctl[sw] }
