package inasched

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/p4/ina"
	"github.com/tracebed/tracebed/topologies"
)

// WorkerPort is the UDP port of a job's workers (and parameter server) for
// switch job id j: 40000 + j, as workloads/allreduce.Setup uses.
func WorkerPort(j uint16) uint16 { return 40000 + j }

// P4RT is the Binder of the INA data plane: it writes each binding as a
// job-table entry (with the job's multicast group) through P4Runtime, on the
// switch's p4rt.Client, using p4/ina's controller helpers. A job that moves
// is rebound with the round-range protocol of docs/ina-dataplane.md, so the
// move takes effect at an iteration boundary.
//
// Trace job ids can be any number; the switch's job ids are 0 to
// ina.MaxJobs−1, so P4RT hands them out as jobs are bound and takes them
// back when they are unbound.
type P4RT struct {
	// Endpoints, when set, gives the UDP endpoints the bindings of trace
	// job job name: the port its workers listen on and its parameter
	// server (an invalid address: none). By default the workers listen on
	// WorkerPort of the switch job id and the parameter server runs with
	// the first worker; packet-level runs whose hosts run agents on fixed
	// ports, and dedicated parameter-server hosts, set it before binding.
	Endpoints func(job int) (workerPort uint16, ps netip.AddrPort)

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

// Bind implements Binder.
func (b *P4RT) Bind(ctx context.Context, sw string, job int, bd Binding, workers []string) error {
	ctl, s := b.ctl[sw], b.sw[sw]
	if ctl == nil {
		return fmt.Errorf("switch %s has no P4Runtime client", sw)
	}
	if bd.Mode != Pool && bd.Mode != Shared {
		return fmt.Errorf("job %d: a %v binding is not p4/ina's to run (its modes are pool and shared)", job, bd.Mode)
	}
	if len(workers) > ina.MaxWorkers {
		return fmt.Errorf("job %d has %d workers; the INA data plane aggregates at most %d", job, len(workers), ina.MaxWorkers)
	}
	id, bound := s.ids[job]
	if !bound {
		switch {
		case len(s.free) > 0:
			id, s.free = s.free[len(s.free)-1], s.free[:len(s.free)-1]
		case int(s.next) < ina.MaxJobs:
			id = s.next
			s.next++
		default:
			return fmt.Errorf("switch %s: more than %d jobs bound at once", sw, ina.MaxJobs)
		}
	}
	port, ps := WorkerPort(id), netip.AddrPort{}
	if b.Endpoints != nil {
		port, ps = b.Endpoints(job)
	}
	addrs := make([]netip.AddrPort, len(workers))
	for i, w := range workers {
		n := b.top.Node(w)
		if n == nil || !n.IsHost() {
			return fmt.Errorf("job %d: worker %q is not a host", job, w)
		}
		addrs[i] = netip.AddrPortFrom(n.IP, port)
	}
	if b.Endpoints == nil {
		ps = addrs[0] // the job's parameter server, with its first worker
	}
	b.gens++
	next := ina.Binding{
		Job: id, FromRound: 0, ToRound: ina.MaxRound, Mode: ina.ModePool, Gen: b.gens,
		Base: uint32(bd.Base), Size: uint32(bd.Size), Workers: uint8(len(workers)), Group: id + 1,
	}
	if bd.Mode == Shared {
		if !ps.IsValid() {
			return fmt.Errorf("job %d: a shared binding needs a parameter server", job)
		}
		next.Mode = ina.ModeShared
		next.PS = ps
	}
	if err := next.Check(int(bd.Base + bd.Size)); err != nil {
		return err
	}
	if bound {
		if _, err := ctl.Rebind(ctx, id, next, 0); err != nil {
			return err
		}
		s.retired[id] = false
		return nil
	}
	members, err := ina.Members(b.top, sw, addrs)
	if err != nil {
		return err
	}
	if err := ctl.SetGroup(ctx, id+1, members); err != nil {
		return err
	}
	if err := ctl.Bind(ctx, next); err != nil {
		return err
	}
	s.ids[job] = id
	s.n[id] = len(members)
	return nil
}

// Retire deletes the job-table entries a move left behind on switch sw
// (the old binding, cut to the rounds before the move) once the switch has
// seen every worker of the job in its new binding (ina.Controller.Retire),
// so that a very late packet of an old round finds no binding instead of
// another job's aggregators. Call it at the job's iteration boundaries
// after a move; it returns at once when nothing is left to retire, and
// reports whether something still is.
func (b *P4RT) Retire(ctx context.Context, sw string, job int) (pending bool, err error) {
	ctl, s := b.ctl[sw], b.sw[sw]
	if ctl == nil {
		return false, fmt.Errorf("switch %s has no P4Runtime client", sw)
	}
	id, ok := s.ids[job]
	if !ok {
		return false, nil
	}
	if done, known := s.retired[id]; !known || done {
		return false, nil
	}
	pending, err = ctl.Retire(ctx, id)
	if err != nil {
		return true, err
	}
	s.retired[id] = !pending
	return pending, nil
}

// Unbind implements Binder.
func (b *P4RT) Unbind(ctx context.Context, sw string, job int) error {
	ctl, s := b.ctl[sw], b.sw[sw]
	if ctl == nil {
		return fmt.Errorf("switch %s has no P4Runtime client", sw)
	}
	id, ok := s.ids[job]
	if !ok {
		return nil
	}
	if err := ctl.Unbind(ctx, id); err != nil {
		return err
	}
	if err := ctl.DeleteGroup(ctx, id+1, s.n[id]); err != nil {
		return err
	}
	delete(s.ids, job)
	delete(s.n, id)
	delete(s.retired, id)
	s.free = append(s.free, id)
	return nil
}
