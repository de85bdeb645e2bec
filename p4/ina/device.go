package ina

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tracebed/tracebed/emulator/frame"
	"github.com/tracebed/tracebed/emulator/p4rt"
)

// This file is the pipeline's P4Runtime face (p4rt.Device): the job,
// route and replica tables, multicast groups, registers and counters, all
// addressed by the ids of the pipeline's P4Info.

// Register kinds.
const (
	regBitmap = iota
	regCount
	regGen
	regRound
	regOffset
	regOverflow
	regValue
	regJobRound
	regJobWorkers
	regJobEpoch
)

// regKinds maps the P4Info names of the registers other than the value
// slices (agg_value_i) to their kinds.
var regKinds = map[string]int{
	RegBitmap: regBitmap, RegCount: regCount, RegGen: regGen, RegRound: regRound,
	RegOffset: regOffset, RegOverflow: regOverflow, RegJobRound: regJobRound, RegJobWorkers: regJobWorkers,
	RegJobEpoch: regJobEpoch,
}

type regInfo struct {
	kind, value int // value: index i of agg_value_i
	size, width int
}

// bind declares the pipeline's P4Info objects in t: how each table,
// register, counter and the multicast groups reach the Go twin. It is the
// one place to extend when ina.p4 grows an object; everything else of
// P4Runtime is p4rt.Target's.
func (p *Pipeline) bind(t *p4rt.Target) error {
	tables := []struct {
		name  string
		apply func(*p4rt.Change) error
	}{
		{TableJobs, p.applyJob},
		{TableRoutes, p.applyRoute},
		// The Go twin's address comes from the topology; the entries are
		// kept for reads, so one controller drives both twins.
		{TableLocal, p4rt.StoreOnly},
		{TableReplicas, p.applyReplica},
	}
	for _, tb := range tables {
		if err := t.Table(tb.name, tb.apply); err != nil {
			return err
		}
	}
	counters := []struct {
		name  string
		cells []counterCell
	}{
		{CounterPackets, p.packets[:]}, {CounterAggregated, p.aggregated[:]}, {CounterResults, p.results[:]},
		{CounterCollisions, p.collisions[:]}, {CounterOverflows, p.overflows[:]}, {CounterUpward, p.upward[:]},
		{CounterJobDrops, p.jobDrops[:]}, {CounterDrops, p.drops[:]}, {CounterForwarded, p.forwarded[:]},
		{CounterProgress, p.progress[:]}, {CounterHeld, p.held},
	}
	for _, c := range counters {
		cells := c.cells
		if err := t.Counter(c.name, p4rt.CounterCells{
			Get: func(i int) (uint64, uint64) { return cells[i].pk, cells[i].by },
			Set: func(i int, pk, by uint64) { cells[i] = counterCell{pk, by} },
		}); err != nil {
			return err
		}
	}
	for _, r := range p.info.GetRegisters() {
		name := r.GetPreamble().GetName()
		ri := regInfo{size: int(r.GetSize()), width: p4rt.RegisterWidth(r)}
		if kind, ok := regKinds[name]; ok {
			ri.kind = kind
		} else {
			i, e := strconv.Atoi(strings.TrimPrefix(name, RegValuePrefix))
			if !strings.HasPrefix(name, RegValuePrefix) || e != nil || i < 0 || i >= p.k {
				return fmt.Errorf("ina: p4info register %q is not one of the pipeline's", name)
			}
			ri.kind, ri.value = regValue, i
		}
		if err := t.Register(name, p4rt.RegisterCells{
			Get: func(i int) uint64 { return p.regGet(ri, i) },
			Set: func(i int, v uint64) { p.regSet(ri, i, v) },
		}); err != nil {
			return err
		}
	}
	t.MulticastGroups(p.applyGroup)
	if u := t.Unbound(); len(u) > 0 {
		return fmt.Errorf("ina: p4info objects without a binding: %v", u)
	}
	return nil
}

// routeState is a route entry's: the route it replaced, restored on delete.
type routeState struct {
	prev []int
}

func errf(c codes.Code, format string, args ...any) error { return status.Errorf(c, format, args...) }

// P4Info implements p4rt.Device.
func (p *Pipeline) P4Info() *p4configv1.P4Info { return p.rt.P4Info() }

// Write implements p4rt.Device.
func (p *Pipeline) Write(updates []*p4v1.Update) error { return p.rt.Write(updates) }

// Read implements p4rt.Device.
func (p *Pipeline) Read(q *p4v1.Entity, yield func(*p4v1.Entity) error) error {
	return p.rt.Read(q, yield)
}

// applyJob installs a binding of the job table.
func (p *Pipeline) applyJob(c *p4rt.Change) error {
	if c.Type == p4v1.Update_DELETE {
		old := c.Old.State.(*jobEntry)
		p.jobs[old.job] = slices.DeleteFunc(p.jobs[old.job], func(e *jobEntry) bool { return e == old })
		return nil
	}
	if c.Entry.IsDefault {
		return p4rt.KeepDefault(c)
	}
	e := c.Entry
	job := e.Exact(FieldJob)
	if job >= MaxJobs {
		return errf(codes.InvalidArgument, "job %d: job ids go up to %d", job, MaxJobs-1)
	}
	lo, hi := e.Range(FieldRound)
	a := e.Action()
	b := Binding{
		Job: uint16(job), FromRound: uint32(lo), ToRound: uint32(hi),
		Mode: uint8(a.Uint(ParamMode)), Gen: uint32(a.Uint(ParamGen)),
		Base: uint32(a.Uint(ParamBase)), Size: uint32(a.Uint(ParamSize)),
		Workers: uint8(a.Uint(ParamWorkers)), Group: uint16(a.Uint(ParamGroup)),
		Members: uint32(a.Uint(ParamMembers)), Hold: uint8(a.Uint(ParamHold)), Place: uint8(a.Uint(ParamPlace)),
		Epoch: uint32(a.Uint(ParamEpoch)),
	}
	if ps, port := a.Uint(ParamPSAddr), a.Uint(ParamPSPort); ps != 0 || port != 0 {
		b.PS = netip.AddrPortFrom(ipv4(uint32(ps)), uint16(port))
	}
	if up := a.Uint(ParamUpAddr); up != 0 {
		b.Up = ipv4(uint32(up))
	}
	if err := b.Check(p.cfg.Aggregators); err != nil {
		return errf(codes.InvalidArgument, "%v", err)
	}
	je := &jobEntry{
		job: b.Job, lo: b.FromRound, hi: b.ToRound, prio: e.Priority, mode: b.Mode, gen: b.Gen,
		base: b.Base, size: b.Size, workers: b.Workers, all: AllWorkers(int(b.Workers)),
		members: b.Contributors(), group: b.Group, hold: b.Hold, place: b.Place, epoch: b.Epoch,
	}
	if b.PS.IsValid() {
		je.psIP, je.psPort = b.PS.Addr().As4(), b.PS.Port()
	}
	if b.Up.IsValid() {
		je.up, je.hasUp = b.Up.As4(), true
	}
	if c.Type == p4v1.Update_MODIFY {
		*c.Old.State.(*jobEntry) = *je
		return nil
	}
	p.jobs[b.Job] = append(p.jobs[b.Job], je)
	slices.SortStableFunc(p.jobs[b.Job], func(a, b *jobEntry) int { return int(b.prio) - int(a.prio) })
	e.State = je
	return nil
}

// applyRoute installs a /32 route in the forwarding pipeline.
func (p *Pipeline) applyRoute(c *p4rt.Change) error {
	if c.Type == p4v1.Update_DELETE {
		v, _ := c.Old.LPM(FieldDst)
		p.fwd.SetRoute(ipv4(uint32(v)), c.Old.State.(*routeState).prev)
		return nil
	}
	if c.Entry.IsDefault {
		return p4rt.KeepDefault(c)
	}
	v, plen := c.Entry.LPM(FieldDst)
	if plen != 32 {
		return errf(codes.Unimplemented, "routes: the Go pipeline takes /32 routes only, not /%d", plen)
	}
	dst := ipv4(uint32(v))
	var ports []int
	if a := c.Entry.Action(); a.Name() == ActionForward {
		ports = []int{int(a.Uint(ParamPort))}
	}
	if c.Type == p4v1.Update_INSERT {
		c.Entry.State = &routeState{prev: slices.Clone(p.fwd.Route(dst))}
	}
	p.fwd.SetRoute(dst, ports)
	return nil
}

// applyReplica installs the rewrite of one multicast copy.
func (p *Pipeline) applyReplica(c *p4rt.Change) error {
	e := c.Entry
	if c.Type == p4v1.Update_DELETE {
		e = c.Old
	} else if e.IsDefault {
		return p4rt.KeepDefault(c)
	}
	key := uint32(e.Exact(FieldGroup))<<16 | uint32(e.Exact(FieldRID))
	a := e.Action()
	if c.Type == p4v1.Update_DELETE || a.Name() == ActionDropReplica {
		delete(p.replicas, key)
		return nil
	}
	r := &replica{ip: ipv4(uint32(a.Uint(ParamAddr))).As4(), port: uint16(a.Uint(ParamPort))}
	putMAC(&r.dmac, a.Uint(ParamDstMAC))
	putMAC(&r.smac, a.Uint(ParamSrcMAC))
	p.replicas[key] = r
	return nil
}

func putMAC(m *frame.MAC, v uint64) {
	for i := 5; i >= 0; i-- {
		m[i] = byte(v)
		v >>= 8
	}
}

// applyGroup installs a multicast group.
func (p *Pipeline) applyGroup(c *p4rt.GroupChange) error {
	if c.ID > 0xffff {
		return errf(codes.InvalidArgument, "multicast group id %d: want 1 to 65535", c.ID)
	}
	if c.Type == p4v1.Update_DELETE {
		delete(p.groups, uint16(c.ID))
		return nil
	}
	ng := &group{}
	for _, r := range c.Replicas {
		if r.Port == 0 || r.Port > 511 || r.Instance > 0xffff {
			return errf(codes.InvalidArgument, "multicast group %d: replica (port %d, instance %d): ports are 1 to 511, instances 0 to 65535", c.ID, r.Port, r.Instance)
		}
		ng.reps = append(ng.reps, groupReplica{port: r.Port, instance: r.Instance})
	}
	p.groups[uint16(c.ID)] = ng
	return nil
}

func (p *Pipeline) regGet(ri regInfo, i int) uint64 {
	switch ri.kind {
	case regBitmap:
		return uint64(p.bitmap[i])
	case regCount:
		return uint64(p.count[i])
	case regGen:
		return uint64(p.gen[i])
	case regRound:
		return uint64(p.round[i])
	case regOffset:
		return uint64(p.offset[i])
	case regOverflow:
		return uint64(p.ovf[i])
	case regValue:
		return uint64(uint32(p.values[i*p.k+ri.value]))
	case regJobRound:
		return uint64(p.jobRound[i])
	case regJobWorkers:
		return uint64(p.jobWorkers[i])
	case regJobEpoch:
		return uint64(p.jobEpoch[i])
	}
	return 0
}

func (p *Pipeline) regSet(ri regInfo, i int, v uint64) {
	switch ri.kind {
	case regBitmap:
		p.bitmap[i] = uint32(v)
	case regCount:
		p.setCount(i, uint8(v)) // CounterHeld follows
	case regGen:
		p.gen[i] = uint32(v)
	case regRound:
		p.round[i] = uint32(v)
	case regOffset:
		p.offset[i] = uint32(v)
	case regOverflow:
		p.ovf[i] = uint8(v)
	case regValue:
		p.values[i*p.k+ri.value] = int32(uint32(v))
	case regJobRound, regJobWorkers, regJobEpoch:
		// Written by a controller where registers are writable (the Go
		// twin): the progress counters follow, as they follow the data
		// plane's writes.
		r, w, e := p.jobRound[i], p.jobWorkers[i], p.jobEpoch[i]
		switch ri.kind {
		case regJobRound:
			r = uint32(v)
		case regJobWorkers:
			w = uint32(v)
		default:
			e = uint32(v)
		}
		p.setProgress(i, r, w, e)
	}
}
