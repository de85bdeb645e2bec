package freeina

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tracebed/tracebed/emulator/frame"
	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/emulator/roce/wire"
)

// This file is the pipeline's P4Runtime face (p4rt.Device): the tables,
// registers, counters and multicast groups of freeina.p4 bound to the Go
// twin's state; fwd.p4's forwarding objects are the forwarding pipeline's.

func errf(c codes.Code, format string, args ...any) error { return status.Errorf(c, format, args...) }

// bind declares the pipeline's objects in t. It is the one place to
// extend when freeina.p4 grows an object.
func (p *Pipeline) bind(t *p4rt.Target) error {
	if err := p.fwd.Declare(t); err != nil {
		return err
	}
	for _, tb := range []struct {
		name  string
		apply func(*p4rt.Change) error
	}{{TableConns, p.applyConn}, {TableJobs, p.applyJob}, {TableReplicas, p.applyReplica}} {
		if err := t.Table(tb.name, tb.apply); err != nil {
			return err
		}
	}
	for _, c := range []struct {
		name  string
		cells []counterCell
	}{
		{CounterPackets, p.packets[:]}, {CounterAggregated, p.aggregated[:]}, {CounterHeld, p.held[:]},
		{CounterResults, p.results[:]}, {CounterAnswers, p.answers[:]}, {CounterOverflows, p.overflows[:]},
		{CounterJobDrops, p.jobDrops[:]},
	} {
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
		get, set, err := p.registerCells(name)
		if err != nil {
			return err
		}
		if err := t.Register(name, p4rt.RegisterCells{Get: get, Set: set}); err != nil {
			return err
		}
	}
	t.MulticastGroups(p.applyGroup)
	if u := t.Unbound(); len(u) > 0 {
		return fmt.Errorf("freeina: p4info objects without a binding: %v", u)
	}
	return nil
}

// registerCells returns the accessors of register name.
func (p *Pipeline) registerCells(name string) (func(int) uint64, func(int, uint64), error) {
	u32 := func(s []uint32, mask uint32) (func(int) uint64, func(int, uint64), error) {
		return func(i int) uint64 { return uint64(s[i]) }, func(i int, v uint64) { s[i] = uint32(v) & mask }, nil
	}
	u8 := func(s []uint8) (func(int) uint64, func(int, uint64), error) {
		return func(i int) uint64 { return uint64(s[i]) }, func(i int, v uint64) { s[i] = uint8(v) }, nil
	}
	switch name {
	case RegBitmap:
		return u32(p.bitmap, ^uint32(0))
	case RegGen:
		return u32(p.gen, ^uint32(0))
	case RegChunk:
		return u32(p.chunk, ^uint32(0))
	case RegCount:
		return u8(p.count)
	case RegOverflow:
		return u8(p.ovf)
	}
	i, err := strconv.Atoi(strings.TrimPrefix(name, RegValuePrefix))
	if !strings.HasPrefix(name, RegValuePrefix) || err != nil || i < 0 || i >= p.k {
		return nil, nil, fmt.Errorf("freeina: p4info register %q is not one of the pipeline's", name)
	}
	k := p.k
	return func(c int) uint64 { return uint64(uint32(p.values[c*k+i])) },
		func(c int, v uint64) { p.values[c*k+i] = int32(uint32(v)) }, nil
}

// P4Info implements p4rt.Device.
func (p *Pipeline) P4Info() *p4configv1.P4Info { return p.rt.P4Info() }

// Write implements p4rt.Device.
func (p *Pipeline) Write(updates []*p4v1.Update) error { return p.rt.Write(updates) }

// Read implements p4rt.Device.
func (p *Pipeline) Read(q *p4v1.Entity, yield func(*p4v1.Entity) error) error {
	return p.rt.Read(q, yield)
}

func keyOf(e *p4rt.Entry) connKey {
	var k connKey
	putIP(k.src[:], e.Exact(FieldSrc))
	putIP(k.dst[:], e.Exact(FieldDst))
	k.qpn = uint32(e.Exact(FieldQPN))
	return k
}

func putIP(b []byte, v uint64) {
	b[0], b[1], b[2], b[3] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
}

// applyConn installs an entry of TableConns.
func (p *Pipeline) applyConn(c *p4rt.Change) error {
	if c.Type == p4v1.Update_DELETE {
		delete(p.conns, keyOf(c.Old))
		return nil
	}
	if c.Entry.IsDefault {
		return p4rt.KeepDefault(c)
	}
	a := c.Entry.Action()
	job, w := a.Uint(ParamJob), a.Uint(ParamWorker)
	switch {
	case job >= MaxJobs:
		return errf(codes.InvalidArgument, "%s: job %d; job ids go up to %d", TableConns, job, MaxJobs-1)
	case w >= MaxWorkers:
		return errf(codes.InvalidArgument, "%s: worker %d; a job has at most %d workers", TableConns, w, MaxWorkers)
	}
	p.conns[keyOf(c.Entry)] = &conn{job: uint16(job), worker: uint8(w), psn: uint32(a.Uint(ParamPSN)) & wire.PSNMask}
	return nil
}

// applyJob installs a binding of TableJobs.
func (p *Pipeline) applyJob(c *p4rt.Change) error {
	if c.Type == p4v1.Update_DELETE {
		p.jobs[c.Old.Exact(FieldJob)] = nil
		return nil
	}
	if c.Entry.IsDefault {
		return p4rt.KeepDefault(c)
	}
	job := c.Entry.Exact(FieldJob)
	a := c.Entry.Action()
	b := Binding{Job: uint16(job), Gen: uint32(a.Uint(ParamGen)), Base: uint32(a.Uint(ParamBase)),
		Size: uint32(a.Uint(ParamSize)), Chunks: uint32(a.Uint(ParamChunks)),
		Workers: uint8(a.Uint(ParamWorkers)), Group: uint16(a.Uint(ParamGroup))}
	if job >= MaxJobs {
		return errf(codes.InvalidArgument, "%s: job %d; job ids go up to %d", TableJobs, job, MaxJobs-1)
	}
	if err := b.Check(p.cfg.Slots); err != nil {
		return errf(codes.InvalidArgument, "%s: %v", TableJobs, err)
	}
	p.jobs[job] = &binding{gen: b.Gen, base: b.Base, size: b.Size, chunks: b.Chunks, workers: b.Workers, group: b.Group}
	return nil
}

// applyReplica installs the rewrite of one result copy.
func (p *Pipeline) applyReplica(c *p4rt.Change) error {
	e := c.Entry
	if c.Type == p4v1.Update_DELETE {
		e = c.Old
	} else if e.IsDefault {
		return p4rt.KeepDefault(c)
	}
	key := uint32(e.Exact(FieldGroup))<<16 | uint32(e.Exact(FieldRID))
	a := e.Action()
	if c.Type == p4v1.Update_DELETE || a.Name() == ActionNoRep {
		delete(p.replicas, key)
		return nil
	}
	r := &replica{psn: uint32(a.Uint(ParamPSN)) & wire.PSNMask, sport: uint16(a.Uint(ParamRSport)),
		qpn: uint32(a.Uint(ParamRQPN)), rkey: uint32(a.Uint(ParamRKey)), va: a.Uint(ParamVA)}
	putIP(r.src[:], a.Uint(ParamRSrc))
	putIP(r.dst[:], a.Uint(ParamRDst))
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

// applyGroup installs a multicast group: the ports and instances of a
// job's result copies.
func (p *Pipeline) applyGroup(c *p4rt.GroupChange) error {
	if c.ID > 0xffff {
		return errf(codes.InvalidArgument, "multicast group %d: want 1 to 65535", c.ID)
	}
	if c.Type == p4v1.Update_DELETE {
		delete(p.groups, uint16(c.ID))
		return nil
	}
	var reps []groupReplica
	for _, r := range c.Replicas {
		if r.Port == 0 || r.Port > 511 || r.Instance == 0 || r.Instance > 0xffff {
			return errf(codes.InvalidArgument, "multicast group %d: replica (port %d, instance %d): ports are 1 to 511, instances 1 to 65535", c.ID, r.Port, r.Instance)
		}
		reps = append(reps, groupReplica{port: r.Port, instance: r.Instance})
	}
	p.groups[uint16(c.ID)] = slices.Clip(reps)
	return nil
}
