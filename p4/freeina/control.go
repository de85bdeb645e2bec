package freeina

import (
	"context"
	"fmt"
	"net/netip"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"

	"github.com/tracebed/tracebed/emulator/frame"
	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/emulator/roce/wire"
	"github.com/tracebed/tracebed/p4/fwd"
	"github.com/tracebed/tracebed/p4/ina"
	"github.com/tracebed/tracebed/topologies"
)

// Binding is a job's memory for one all-reduce: an entry of TableJobs.
type Binding struct {
	Job uint16
	// Gen is the binding's generation: nonzero and new for every
	// all-reduce, so that cells another binding wrote are never taken for
	// this one's.
	Gen uint32
	// Base and Size are the slots [Base, Base+Size): the hosts' window is
	// Size chunks, chunk c using cell 2·Base + c mod 2·Size (two copies
	// per slot, SwitchML's shadow copy).
	Base, Size uint32
	// Chunks is the number of chunks of the all-reduce; a PSN outside
	// them is another all-reduce's.
	Chunks  uint32
	Workers uint8
	Group   uint16
}

// Check validates b for a switch of slots slots.
func (b Binding) Check(slots int) error {
	switch {
	case b.Gen == 0:
		return fmt.Errorf("job %d: generation 0 is reserved (a cell never written)", b.Job)
	case b.Size == 0 || uint64(b.Base)+uint64(b.Size) > uint64(slots):
		return fmt.Errorf("job %d: slots [%d, %d) outside the switch's %d", b.Job, b.Base, uint64(b.Base)+uint64(b.Size), slots)
	case b.Chunks == 0 || b.Chunks > MaxChunks:
		return fmt.Errorf("job %d: %d chunks; want 1 to %d", b.Job, b.Chunks, MaxChunks)
	case b.Workers < 2 || b.Workers > MaxWorkers:
		return fmt.Errorf("job %d: %d workers; want 2 to %d", b.Job, b.Workers, MaxWorkers)
	case b.Group == 0:
		return fmt.Errorf("job %d: multicast group 0 is reserved", b.Job)
	}
	return nil
}

// Entry returns b as an entry of TableJobs.
func (b Binding) Entry(n *p4rt.Names) (*p4v1.TableEntry, error) {
	return n.TableEntry(TableJobs, []p4rt.Match{p4rt.Exact(FieldJob, uint64(b.Job))}, ActionBind, []p4rt.Arg{
		p4rt.P(ParamGen, uint64(b.Gen)), p4rt.P(ParamBase, uint64(b.Base)), p4rt.P(ParamSize, uint64(b.Size)),
		p4rt.P(ParamChunks, uint64(b.Chunks)), p4rt.P(ParamWorkers, uint64(b.Workers)), p4rt.P(ParamGroup, uint64(b.Group)),
	}, 0)
}

// Link is one RC connection of a job's INA path, from the sender (worker
// i) to the receiver (worker i+1 mod n): what the switch needs to rebuild
// a result for it.
type Link struct {
	// Src and Dst are the sender's and the receiver's addresses; Sport is
	// the UDP source port the sender's RNIC uses.
	Src, Dst netip.Addr
	Sport    uint16
	// QPN is the receiver's queue pair; RKey and VA its result region
	// (the address of chunk 0, chunk c at VA + c·4k).
	QPN  uint32
	RKey uint32
	VA   uint64
}

// Ring is a job's INA path: Links[i] is worker i's connection.
type Ring struct {
	Job   uint16
	Group uint16
	Links []Link
}

// Controller programs the FreeINA data plane of one switch through
// P4Runtime. It keeps no state: it writes what it is told.
type Controller struct {
	c p4rt.Client
	n *p4rt.Names
}

// NewController returns a controller for the switch behind c.
func NewController(c p4rt.Client) (*Controller, error) {
	n, err := p4rt.NewNames(c.P4Info())
	if err != nil {
		return nil, err
	}
	return &Controller{c: c, n: n}, nil
}

// Names returns the index of the switch's P4Info.
func (c *Controller) Names() *p4rt.Names { return c.n }

// Client returns the P4Runtime client.
func (c *Controller) Client() p4rt.Client { return c.c }

func ipUint(a netip.Addr) uint64 {
	b := a.As4()
	return uint64(b[0])<<24 | uint64(b[1])<<16 | uint64(b[2])<<8 | uint64(b[3])
}

func macUint(m frame.MAC) uint64 {
	var v uint64
	for _, c := range m {
		v = v<<8 | uint64(c)
	}
	return v
}

// ringUpdates returns the updates that install (INSERT) or remove
// (DELETE) ring r on switch sw of top: a TableConns entry per connection,
// the multicast group of the result copies (replica i+1 for connection i,
// out of the switch's first shortest-path port towards its receiver) and
// a TableReplicas entry per copy.
func (c *Controller) ringUpdates(t p4v1.Update_Type, top *topologies.Topology, sw string, r Ring) ([]*p4v1.Update, error) {
	n := len(r.Links)
	switch {
	case n < 2 || n > MaxWorkers:
		return nil, fmt.Errorf("job %d: %d connections; a ring has 2 to %d", r.Job, n, MaxWorkers)
	case r.Group == 0:
		return nil, fmt.Errorf("job %d: multicast group 0 is reserved", r.Job)
	case r.Job >= MaxJobs:
		return nil, fmt.Errorf("job %d: job ids go up to %d", r.Job, MaxJobs-1)
	}
	dsts := make([]netip.AddrPort, n)
	for i, l := range r.Links {
		if !l.Src.Is4() || !l.Dst.Is4() {
			return nil, fmt.Errorf("job %d: connection %d (%v → %v) is not IPv4", r.Job, i, l.Src, l.Dst)
		}
		if l.QPN > wire.PSNMask {
			return nil, fmt.Errorf("job %d: connection %d: QP %d is not a 24-bit number", r.Job, i, l.QPN)
		}
		dsts[i] = netip.AddrPortFrom(l.Dst, wire.Port)
	}
	members, err := ina.Members(top, sw, dsts)
	if err != nil {
		return nil, err
	}
	var ups []*p4v1.Update
	var reps []p4rt.Replica
	for i, l := range r.Links {
		ce, err := c.n.TableEntry(TableConns, []p4rt.Match{p4rt.Exact(FieldSrc, ipUint(l.Src)),
			p4rt.Exact(FieldDst, ipUint(l.Dst)), p4rt.Exact(FieldQPN, uint64(l.QPN))},
			ActionConn, []p4rt.Arg{p4rt.P(ParamJob, uint64(r.Job)), p4rt.P(ParamWorker, uint64(i)), p4rt.P(ParamPSN, 0)}, 0)
		if err != nil {
			return nil, err
		}
		m := members[i]
		re, err := c.n.TableEntry(TableReplicas, []p4rt.Match{p4rt.Exact(FieldGroup, uint64(r.Group)), p4rt.Exact(FieldRID, uint64(i+1))},
			ActionReplica, []p4rt.Arg{p4rt.P(ParamRSrc, ipUint(l.Src)), p4rt.P(ParamRDst, ipUint(l.Dst)),
				p4rt.P(ParamRSport, uint64(l.Sport)), p4rt.P(ParamRQPN, uint64(l.QPN)), p4rt.P(ParamRKey, uint64(l.RKey)),
				p4rt.P(ParamVA, l.VA), p4rt.P(ParamDstMAC, macUint(m.DstMAC)), p4rt.P(ParamSrcMAC, macUint(m.SrcMAC)),
				p4rt.P(ParamPSN, 0)}, 0)
		if err != nil {
			return nil, err
		}
		ups = append(ups, &p4v1.Update{Type: t, Entity: p4rt.Table(ce)}, &p4v1.Update{Type: t, Entity: p4rt.Table(re)})
		reps = append(reps, p4rt.Replica{Port: m.Port, Instance: uint32(i + 1)})
	}
	ups = append(ups, &p4v1.Update{Type: t, Entity: p4rt.MulticastGroup(uint32(r.Group), reps)})
	if t == p4v1.Update_INSERT {
		// A job id comes back into use: its counters start from zero.
		for _, name := range []string{CounterPackets, CounterAggregated, CounterHeld, CounterResults, CounterAnswers, CounterOverflows} {
			id, err := c.n.CounterID(name)
			if err != nil {
				return nil, err
			}
			ups = append(ups, p4rt.Modify(counterEntry(id, int64(r.Job))))
		}
		id, err := c.n.CounterID(CounterJobDrops)
		if err != nil {
			return nil, err
		}
		for d := range NumJobDrops {
			ups = append(ups, p4rt.Modify(counterEntry(id, int64(r.Job)*NumJobDrops+int64(d))))
		}
	}
	return ups, nil
}

func counterEntry(id uint32, index int64) *p4v1.Entity {
	return &p4v1.Entity{Entity: &p4v1.Entity_CounterEntry{CounterEntry: &p4v1.CounterEntry{CounterId: id,
		Index: &p4v1.Index{Index: index}, Data: &p4v1.CounterData{}}}}
}

// AddRing installs ring r on switch sw of top (once per job, when its
// connections are established).
func (c *Controller) AddRing(ctx context.Context, top *topologies.Topology, sw string, r Ring) error {
	ups, err := c.ringUpdates(p4v1.Update_INSERT, top, sw, r)
	if err != nil {
		return err
	}
	return c.c.Write(ctx, ups...)
}

// RemoveRing removes ring r from switch sw of top.
func (c *Controller) RemoveRing(ctx context.Context, top *topologies.Topology, sw string, r Ring) error {
	ups, err := c.ringUpdates(p4v1.Update_DELETE, top, sw, r)
	if err != nil {
		return err
	}
	return c.c.Write(ctx, ups...)
}

// Bind grants the job the memory of b for its next all-reduce, whose
// first chunk worker i sends with PSN psn[i]. The PSNs are written first —
// the ParamPSN of the job's TableConns entries and of its result copies'
// TableReplicas entries (table parameters: bmv2's P4Runtime server, PI,
// writes no register), read back and modified — then the binding
// (inserted, or replacing the job's previous one), in two writes: a
// switch applies the updates of one write in any order. The job's ring
// must be installed (AddRing).
func (c *Controller) Bind(ctx context.Context, b Binding, psn []uint32) error {
	if len(psn) != int(b.Workers) {
		return fmt.Errorf("job %d: %d PSNs for %d workers", b.Job, len(psn), b.Workers)
	}
	if err := b.Check(1 << 20); err != nil {
		return err
	}
	ups, err := c.psnUpdates(ctx, b, psn)
	if err != nil {
		return err
	}
	if err := c.c.Write(ctx, ups...); err != nil {
		return err
	}
	te, err := b.Entry(c.n)
	if err != nil {
		return err
	}
	if err := c.c.Write(ctx, p4rt.Modify(p4rt.Table(te))); err == nil {
		return nil
	}
	return c.c.Write(ctx, p4rt.Insert(p4rt.Table(te)))
}

// psnUpdates reads the job's TableConns entries and its group's
// TableReplicas entries and returns them modified to carry psn[worker].
func (c *Controller) psnUpdates(ctx context.Context, b Binding, psn []uint32) ([]*p4v1.Update, error) {
	connsID, err := c.n.TableID(TableConns)
	if err != nil {
		return nil, err
	}
	repsID, err := c.n.TableID(TableReplicas)
	if err != nil {
		return nil, err
	}
	groupField, err := c.n.MatchFieldID(TableReplicas, FieldGroup)
	if err != nil {
		return nil, err
	}
	ridField, err := c.n.MatchFieldID(TableReplicas, FieldRID)
	if err != nil {
		return nil, err
	}
	// Parameter ids: a connection's job, worker and PSN; a copy's PSN.
	var ids [4]uint32
	for i, x := range []struct{ action, name string }{{ActionConn, ParamJob}, {ActionConn, ParamWorker}, {ActionConn, ParamPSN},
		{ActionReplica, ParamPSN}} {
		if ids[i], err = c.n.ParamID(x.action, x.name); err != nil {
			return nil, err
		}
	}
	ents, err := c.c.Read(ctx, p4rt.Table(&p4v1.TableEntry{TableId: connsID}), p4rt.Table(&p4v1.TableEntry{TableId: repsID}))
	if err != nil {
		return nil, fmt.Errorf("job %d: read its connections: %w", b.Job, err)
	}
	get := func(a *p4v1.Action, id uint32) (uint64, bool) {
		for _, p := range a.GetParams() {
			if p.GetParamId() == id {
				v, err := p4rt.DecodeUint(p.GetValue(), 32)
				return v, err == nil
			}
		}
		return 0, false
	}
	set := func(a *p4v1.Action, id uint32, v uint32) {
		for _, p := range a.GetParams() {
			if p.GetParamId() == id {
				p.Value = p4rt.EncodeUint(uint64(v & wire.PSNMask))
			}
		}
	}
	var ups []*p4v1.Update
	conns, reps := 0, 0
	for _, e := range ents {
		te := e.GetTableEntry()
		a := te.GetAction().GetAction()
		if a == nil || te.GetIsDefaultAction() {
			continue
		}
		switch te.GetTableId() {
		case connsID:
			job, ok1 := get(a, ids[0])
			w, ok2 := get(a, ids[1])
			if !ok1 || !ok2 || job != uint64(b.Job) {
				continue
			}
			if w >= uint64(len(psn)) {
				return nil, fmt.Errorf("job %d: connection of worker %d, the binding has %d workers", b.Job, w, len(psn))
			}
			set(a, ids[2], psn[w])
			conns++
		case repsID:
			// The copy for worker w's connection is instance w+1.
			var group, rid uint64
			for _, m := range te.GetMatch() {
				switch m.GetFieldId() {
				case groupField:
					group, _ = p4rt.DecodeUint(m.GetExact().GetValue(), 16)
				case ridField:
					rid, _ = p4rt.DecodeUint(m.GetExact().GetValue(), 16)
				}
			}
			if group != uint64(b.Group) {
				continue
			}
			if rid == 0 || rid > uint64(len(psn)) {
				return nil, fmt.Errorf("job %d: result copy %d, the binding has %d workers", b.Job, rid, len(psn))
			}
			set(a, ids[3], psn[rid-1])
			reps++
		default:
			continue
		}
		ups = append(ups, p4rt.Modify(p4rt.Table(&p4v1.TableEntry{TableId: te.GetTableId(), Match: te.GetMatch(),
			Priority: te.GetPriority(), Action: te.GetAction()})))
	}
	if conns != len(psn) || reps != len(psn) {
		return nil, fmt.Errorf("job %d: %d connections and %d result copies on the switch, want %d of each: install its ring first (AddRing)", b.Job, conns, reps, len(psn))
	}
	return ups, nil
}

// Unbind releases the job's memory: its packets are dropped from now on
// (counted no_binding), which only ever happens to duplicates, since the
// hosts release an all-reduce once every packet of it is acknowledged.
func (c *Controller) Unbind(ctx context.Context, job uint16) error {
	te, err := c.n.TableEntry(TableJobs, []p4rt.Match{p4rt.Exact(FieldJob, uint64(job))}, ActionBind, []p4rt.Arg{
		p4rt.P(ParamGen, 0), p4rt.P(ParamBase, 0), p4rt.P(ParamSize, 0), p4rt.P(ParamChunks, 0),
		p4rt.P(ParamWorkers, 0), p4rt.P(ParamGroup, 0)}, 0)
	if err != nil {
		return err
	}
	return c.c.Write(ctx, p4rt.Delete(p4rt.Table(te)))
}

// JobCounters are a job's counters.
type JobCounters struct {
	Packets, Bytes   uint64
	Aggregated, Held uint64
	Results, Answers uint64
	Overflows        uint64
	Drops            [NumJobDrops]uint64
}

// Counters reads job's counters.
func (c *Controller) Counters(ctx context.Context, job uint16) (JobCounters, error) {
	var jc JobCounters
	names := []string{CounterPackets, CounterAggregated, CounterHeld, CounterResults, CounterAnswers, CounterOverflows}
	var qs []*p4v1.Entity
	for _, name := range names {
		q, err := c.n.CounterQuery(name, int64(job))
		if err != nil {
			return jc, err
		}
		qs = append(qs, q)
	}
	for r := range NumJobDrops {
		q, err := c.n.CounterQuery(CounterJobDrops, int64(job)*NumJobDrops+int64(r))
		if err != nil {
			return jc, err
		}
		qs = append(qs, q)
	}
	ents, err := c.c.Read(ctx, qs...)
	if err != nil {
		return jc, err
	}
	if len(ents) != len(qs) {
		return jc, fmt.Errorf("freeina: %d counters read for %d asked", len(ents), len(qs))
	}
	pk := func(i int) uint64 { return uint64(ents[i].GetCounterEntry().GetData().GetPacketCount()) }
	jc.Packets, jc.Bytes = pk(0), uint64(ents[0].GetCounterEntry().GetData().GetByteCount())
	jc.Aggregated, jc.Held, jc.Results, jc.Answers, jc.Overflows = pk(1), pk(2), pk(3), pk(4), pk(5)
	for r := range NumJobDrops {
		jc.Drops[r] = pk(len(names) + r)
	}
	return jc, nil
}

// FrameCounts is the switch's frame accounting. Every frame it receives is
// counted once: in the forwarding pipeline's forwarded or drops cells (a
// frame not of an INA connection) or in its job's freeina_packets cell (a
// frame of an INA connection, whatever becomes of it; the job's
// freeina_job_drops cells say why one was dropped). One frame the switch
// sends is counted besides: the aggregate it returns for a retransmission
// of a complete chunk (freeina_answers) passes the forwarding table, as in
// freeina.p4, and is counted there too. So the frames received are
// forwarded + drops + freeina_packets − freeina_answers (Total).
type FrameCounts struct {
	Forwarded  uint64
	Drops      [fwd.NumDrops]uint64
	JobPackets uint64
	Answers    uint64
}

// Total is the frames received that the counts account for.
func (f FrameCounts) Total() uint64 {
	n := f.Forwarded + f.JobPackets - f.Answers
	for _, d := range f.Drops {
		n += d
	}
	return n
}

// FrameCounts reads the switch's frame accounting (four wildcard counter
// reads).
func (c *Controller) FrameCounts(ctx context.Context) (FrameCounts, error) {
	var fc FrameCounts
	for _, name := range []string{fwd.CounterFwdName, fwd.CounterDropName, CounterPackets, CounterAnswers} {
		cells, err := p4rt.CounterPackets(ctx, c.c, c.n, name)
		if err != nil {
			return fc, err
		}
		for i, pk := range cells {
			switch name {
			case fwd.CounterFwdName:
				fc.Forwarded += pk
			case fwd.CounterDropName:
				if i >= 0 && i < fwd.NumDrops {
					fc.Drops[i] = pk
				}
			case CounterPackets:
				fc.JobPackets += pk
			default:
				fc.Answers += pk
			}
		}
	}
	return fc, nil
}
