package inasched

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/p4/ina"
	"github.com/tracebed/tracebed/topologies"
)

// WorkerPort is the UDP port of a job's workers (and parameter server) for
// switch job id j: 40000 + j, as workloads/allreduce.Setup uses.
func WorkerPort(j uint16) uint16 { return 40000 + j }

// P4RT is the Binder of the INA data plane: it writes each binding as a
// job-table entry (with the job's multicast group) through P4Runtime, on
// every switch of the job's tree, using p4/ina's controller helpers
// (ina.Tree): one switch for a job in one rack; for a job aggregated in
// two levels, its racks' ToRs (each completing its rack's workers and
// sending one partial up) and the top switch (aggregating the racks'
// partials, multicasting the result down through the ToRs). A job that
// moves is rebound with the round-range protocol of
// docs/ina-dataplane.md, on every switch, so the move takes effect at an
// iteration boundary.
//
// Trace job ids can be any number; the switch's job ids are 0 to
// ina.MaxJobs−1, so P4RT hands them out as jobs are bound and takes them
// back when they are unbound. A job uses one id on every switch of its
// tree (its packets carry it from level to level).
type P4RT struct {
	// Endpoints, when set, gives the UDP endpoints the bindings of trace
	// job job name: the port its workers listen on and its parameter
	// server (an invalid address: none). By default the workers listen on
	// WorkerPort of the switch job id and the parameter server runs with
	// the first worker; packet-level runs whose hosts run agents on fixed
	// ports, and dedicated parameter-server hosts, set it before binding.
	Endpoints func(job int) (workerPort uint16, ps netip.AddrPort)
	// Hold is when shared-mode bindings release their aggregators
	// (ina.HoldCompletion or ina.HoldReturn); Place how their chunks find
	// an aggregator (ina.PlaceHash, or ina.PlaceSlot: named by the
	// packets, ATP's slot remapping).
	Hold, Place uint8

	top  *topologies.Topology
	ctl  map[string]*ina.Controller
	sw   map[string]*swJobs
	gens uint32
}

type swJobs struct {
	ids     map[int]uint16 // trace job → switch job id
	free    []uint16
	next    uint16
	n       map[uint16]int // switch job id → group members
	retired map[uint16]bool
	// changes counts the bindings planned on the switch (installs, moves,
	// removals): a retirement's answer is recorded only if none was
	// planned while it was on its way (see RetireCall).
	changes uint64
}

// isFree reports whether switch job id id is unused on the switch.
func (s *swJobs) isFree(id uint16) bool { return id >= s.next || slices.Contains(s.free, id) }

// claim marks id used on the switch.
func (s *swJobs) claim(id uint16) {
	if i := slices.Index(s.free, id); i >= 0 {
		s.free = slices.Delete(s.free, i, i+1)
		return
	}
	for x := s.next; x < id; x++ {
		s.free = append(s.free, x)
	}
	s.next = id + 1
}

// NewP4RT returns a binder for the switches of top, reached through clients
// (one per switch that aggregates, by name).
func NewP4RT(top *topologies.Topology, clients map[string]p4rt.Client) (*P4RT, error) {
	b := &P4RT{top: top, ctl: map[string]*ina.Controller{}, sw: map[string]*swJobs{}}
	for name, c := range clients {
		ctl, err := ina.NewController(c)
		if err != nil {
			return nil, fmt.Errorf("switch %s: %w", name, err)
		}
		b.ctl[name] = ctl
		b.sw[name] = &swJobs{ids: map[int]uint16{}, n: map[uint16]int{}, retired: map[uint16]bool{}}
	}
	return b, nil
}

// SwitchJob returns the switch job id of trace job job on sw, if bound.
func (b *P4RT) SwitchJob(sw string, job int) (uint16, bool) {
	s := b.sw[sw]
	if s == nil {
		return 0, false
	}
	id, ok := s.ids[job]
	return id, ok
}

// Controller returns the INA controller of a switch.
func (b *P4RT) Controller(sw string) *ina.Controller { return b.ctl[sw] }

// switchID returns the switch job id of a job on every switch of sws:
// the one it has if bound, else one free on all of them (on one switch,
// the last freed, else the next unused).
func (b *P4RT) switchID(sws []string, job int) (id uint16, bound bool, err error) {
	for _, sw := range sws {
		if b.ctl[sw] == nil {
			return 0, false, fmt.Errorf("switch %s has no P4Runtime client", sw)
		}
	}
	if id, ok := b.sw[sws[0]].ids[job]; ok {
		return id, true, nil
	}
	if len(sws) == 1 {
		s := b.sw[sws[0]]
		switch {
		case len(s.free) > 0:
			return s.free[len(s.free)-1], false, nil
		case int(s.next) < ina.MaxJobs:
			return s.next, false, nil
		}
		return 0, false, fmt.Errorf("switch %s: more than %d jobs bound at once", sws[0], ina.MaxJobs)
	}
	for x := range ina.MaxJobs {
		free := true
		for _, sw := range sws {
			free = free && b.sw[sw].isFree(uint16(x))
		}
		if free {
			return uint16(x), false, nil
		}
	}
	return 0, false, fmt.Errorf("switches %v: no job id free on all of them", sws)
}

// Bind installs or moves j's binding and returns when the switches hold
// it: BindCall, run at once, for callers that may block (tests, drivers).
func (b *P4RT) Bind(ctx context.Context, j Job, bd Binding, workers []string) error {
	call, err := b.BindCall(j, bd, workers)
	if err != nil {
		return err
	}
	return Run(ctx, call)
}

// Unbind removes j's bindings and returns when the switches no longer
// hold them: UnbindCall, run at once.
func (b *P4RT) Unbind(ctx context.Context, j Job) error {
	call, err := b.UnbindCall(j)
	if err != nil {
		return err
	}
	return Run(ctx, call)
}

// Retire is RetireCall run at once: it reports whether something is left
// to retire.
func (b *P4RT) Retire(ctx context.Context, j Job) (pending bool, err error) {
	call, commit, err := b.RetireCall(j)
	if err != nil {
		return false, err
	}
	if err := Run(ctx, call); err != nil {
		return true, err
	}
	return commit(), nil
}

// BindCall implements Binder.
func (b *P4RT) BindCall(j Job, bd Binding, workers []string) (Call, error) {
	sws := j.Switches()
	if bd.Mode != Pool && bd.Mode != Shared {
		return nil, fmt.Errorf("job %d: a %v binding is not p4/ina's to run (its modes are pool and shared)", j.ID, bd.Mode)
	}
	if len(workers) > ina.MaxWorkers {
		return nil, fmt.Errorf("job %d has %d workers; the INA data plane aggregates at most %d", j.ID, len(workers), ina.MaxWorkers)
	}
	id, bound, err := b.switchID(sws, j.ID)
	if err != nil {
		return nil, err
	}
	port, ps := WorkerPort(id), netip.AddrPort{}
	if b.Endpoints != nil {
		port, ps = b.Endpoints(j.ID)
	}
	addrs := make([]netip.AddrPort, len(workers))
	for i, w := range workers {
		n := b.top.Node(w)
		if n == nil || !n.IsHost() {
			return nil, fmt.Errorf("job %d: worker %q is not a host", j.ID, w)
		}
		addrs[i] = netip.AddrPortFrom(n.IP, port)
	}
	if b.Endpoints == nil {
		ps = addrs[0] // the job's parameter server, with its first worker
	}
	next := ina.Binding{
		Job: id, FromRound: 0, ToRound: ina.MaxRound, Mode: ina.ModePool,
		Base: uint32(bd.Base), Size: uint32(bd.Size), Workers: uint8(len(workers)), Group: id + 1,
	}
	if bd.Mode == Shared {
		if !ps.IsValid() {
			return nil, fmt.Errorf("job %d: a shared binding needs a parameter server", j.ID)
		}
		next.Mode, next.PS, next.Hold, next.Place = ina.ModeShared, ps, b.Hold, b.Place
	}
	tree, err := ina.Tree(b.top, j.Switch, j.Lower, addrs)
	if err != nil {
		return nil, fmt.Errorf("job %d: %w", j.ID, err)
	}
	sbs := make([]ina.Binding, len(tree))
	for i, ts := range tree {
		b.gens++
		sb := next
		sb.Gen, sb.Members, sb.Up = b.gens, ts.Members, ts.Up
		if err := sb.Check(int(bd.Base + bd.Size)); err != nil {
			return nil, err
		}
		sbs[i] = sb
	}
	calls := make([]Call, len(tree))
	for i, ts := range tree {
		ctl, s, name, sb := b.ctl[ts.Name], b.sw[ts.Name], ts.Name, sbs[i]
		s.changes++
		if bound {
			calls[i] = func(ctx context.Context) error {
				if _, err := ctl.Rebind(ctx, id, sb, 0); err != nil {
					return fmt.Errorf("switch %s: %w", name, err)
				}
				return nil
			}
			s.retired[id] = false
			continue
		}
		group := ts.Group
		calls[i] = func(ctx context.Context) error {
			if err := ctl.SetGroup(ctx, id+1, group); err != nil {
				return fmt.Errorf("switch %s: %w", name, err)
			}
			if err := ctl.Bind(ctx, sb); err != nil {
				return fmt.Errorf("switch %s: %w", name, err)
			}
			return nil
		}
		s.claim(id)
		s.ids[j.ID] = id
		s.n[id] = len(group)
	}
	return Sequence(calls...), nil
}

// RetireCall plans the deletion of the job-table entries a move left
// behind on the switches of j's tree (the old binding, cut to the rounds
// before the move), which each switch's call makes once the switch has
// seen every worker of the job it completes in its new binding
// (ina.Controller.Retire), so that a very late packet of an old round
// finds no binding instead of another job's aggregators. Plan it at the
// job's iteration boundaries after a move: when nothing is left to retire
// it returns no call. commit, run on the controller's goroutine once the
// call succeeded, records what the switches answered and reports whether
// something is still left to retire (unless a binding of the switch was
// planned meanwhile: then the next boundary asks again).
func (b *P4RT) RetireCall(j Job) (call Call, commit func() (pending bool), err error) {
	type ask struct {
		s       *swJobs
		id      uint16
		changes uint64
		pending bool
	}
	var asks []*ask
	var calls []Call
	for _, sw := range j.Switches() {
		ctl, s := b.ctl[sw], b.sw[sw]
		if ctl == nil {
			return nil, nil, fmt.Errorf("switch %s has no P4Runtime client", sw)
		}
		id, ok := s.ids[j.ID]
		if !ok {
			continue
		}
		if done, known := s.retired[id]; !known || done {
			continue
		}
		a := &ask{s: s, id: id, changes: s.changes}
		asks = append(asks, a)
		calls = append(calls, func(ctx context.Context) error {
			p, err := ctl.Retire(ctx, id)
			if err != nil {
				return fmt.Errorf("switch %s: %w", sw, err)
			}
			a.pending = p
			return nil
		})
	}
	commit = func() (pending bool) {
		for _, a := range asks {
			if a.s.changes == a.changes {
				a.s.retired[a.id] = !a.pending
			}
			pending = pending || a.pending
		}
		return pending
	}
	return Sequence(calls...), commit, nil
}

// UnbindCall implements Binder.
func (b *P4RT) UnbindCall(j Job) (Call, error) {
	var calls []Call
	for _, sw := range j.Switches() {
		ctl, s := b.ctl[sw], b.sw[sw]
		if ctl == nil {
			return nil, fmt.Errorf("switch %s has no P4Runtime client", sw)
		}
		id, ok := s.ids[j.ID]
		if !ok {
			continue
		}
		n := s.n[id]
		calls = append(calls, func(ctx context.Context) error {
			if err := ctl.Unbind(ctx, id); err != nil {
				return fmt.Errorf("switch %s: %w", sw, err)
			}
			if err := ctl.DeleteGroup(ctx, id+1, n); err != nil {
				return fmt.Errorf("switch %s: %w", sw, err)
			}
			return nil
		})
		s.changes++
		delete(s.ids, j.ID)
		delete(s.n, id)
		delete(s.retired, id)
		s.free = append(s.free, id)
	}
	return Sequence(calls...), nil
}

// Sequence returns a call that runs calls in order and stops at the first
// error; nil if there is none to run.
func Sequence(calls ...Call) Call {
	calls = slices.DeleteFunc(calls, func(c Call) bool { return c == nil })
	switch len(calls) {
	case 0:
		return nil
	case 1:
		return calls[0]
	}
	return func(ctx context.Context) error {
		for _, c := range calls {
			if err := c(ctx); err != nil {
				return err
			}
		}
		return nil
	}
}
