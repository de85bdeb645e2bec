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
	"google.golang.org/protobuf/proto"

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
)

// regKinds maps the P4Info names of the registers other than the value
// slices (agg_value_i) to their kinds.
var regKinds = map[string]int{
	RegBitmap: regBitmap, RegCount: regCount, RegGen: regGen, RegRound: regRound,
	RegOffset: regOffset, RegOverflow: regOverflow, RegJobRound: regJobRound, RegJobWorkers: regJobWorkers,
}

type regInfo struct {
	kind, value int // value: index i of agg_value_i
	size, width int
}

type ids struct {
	jobs, routes, replicas, local uint32
	bind, noJob                   uint32
	forward, drop                 uint32
	replica, dropReplica          uint32
	tables                        map[uint32]*p4configv1.Table
	actions                       map[uint32]*p4configv1.Action
	regs                          map[uint32]regInfo
	counters                      map[uint32]string
	regOrder, counterOrder        []uint32
}

func (x *ids) resolve(info *p4configv1.P4Info, k int) error {
	n, err := p4rt.NewNames(info)
	if err != nil {
		return err
	}
	get := func(f func(string) (uint32, error), name string) uint32 {
		v, e := f(name)
		if e != nil && err == nil {
			err = e
		}
		return v
	}
	x.jobs, x.routes, x.replicas = get(n.TableID, TableJobs), get(n.TableID, TableRoutes), get(n.TableID, TableReplicas)
	x.local = get(n.TableID, TableLocal)
	x.bind, x.noJob = get(n.ActionID, ActionBind), get(n.ActionID, ActionNoJob)
	x.forward, x.drop = get(n.ActionID, ActionForward), get(n.ActionID, ActionDrop)
	x.replica, x.dropReplica = get(n.ActionID, ActionReplica), get(n.ActionID, ActionDropReplica)
	x.tables = map[uint32]*p4configv1.Table{}
	for _, t := range info.GetTables() {
		x.tables[t.GetPreamble().GetId()] = t
	}
	x.actions = map[uint32]*p4configv1.Action{}
	for _, a := range info.GetActions() {
		x.actions[a.GetPreamble().GetId()] = a
	}
	x.regs = map[uint32]regInfo{}
	for _, r := range info.GetRegisters() {
		name := r.GetPreamble().GetName()
		ri := regInfo{size: int(r.GetSize()), width: p4rt.RegisterWidth(r)}
		if kind, ok := regKinds[name]; ok {
			ri.kind = kind
		} else {
			i, e := strconv.Atoi(strings.TrimPrefix(name, RegValuePrefix))
			if !strings.HasPrefix(name, RegValuePrefix) || e != nil || i < 0 || i >= k {
				return fmt.Errorf("ina: p4info register %q is not one of the pipeline's", name)
			}
			ri.kind, ri.value = regValue, i
		}
		x.regs[r.GetPreamble().GetId()] = ri
		x.regOrder = append(x.regOrder, r.GetPreamble().GetId())
	}
	x.counters = map[uint32]string{}
	for _, c := range info.GetCounters() {
		x.counters[c.GetPreamble().GetId()] = c.GetPreamble().GetName()
		x.counterOrder = append(x.counterOrder, c.GetPreamble().GetId())
	}
	return err
}

// storedEntry is a table entry as written, for reads, modifies and deletes.
type storedEntry struct {
	seq   uint64
	te    *p4v1.TableEntry
	job   *jobEntry
	route *routeState
}

type routeState struct {
	dst  netip.Addr
	prev []int // the route before the entry, restored on delete
}

func errf(c codes.Code, format string, args ...any) error { return status.Errorf(c, format, args...) }

// Write implements p4rt.Device.
func (p *Pipeline) Write(updates []*p4v1.Update) error {
	for i, u := range updates {
		if err := p.write(u); err != nil {
			st, _ := status.FromError(err)
			return status.Errorf(st.Code(), "update %d (%v): %s", i, u.GetType(), st.Message())
		}
	}
	return nil
}

func (p *Pipeline) write(u *p4v1.Update) error {
	t := u.GetType()
	if t != p4v1.Update_INSERT && t != p4v1.Update_MODIFY && t != p4v1.Update_DELETE {
		return errf(codes.InvalidArgument, "update type %v", t)
	}
	switch e := u.GetEntity().GetEntity().(type) {
	case *p4v1.Entity_TableEntry:
		return p.writeTable(t, e.TableEntry)
	case *p4v1.Entity_PacketReplicationEngineEntry:
		g := e.PacketReplicationEngineEntry.GetMulticastGroupEntry()
		if g == nil {
			return errf(codes.Unimplemented, "only multicast group entries of the packet replication engine are supported")
		}
		return p.writeGroup(t, g)
	case *p4v1.Entity_RegisterEntry:
		if t != p4v1.Update_MODIFY {
			return errf(codes.InvalidArgument, "register entries can only be modified, not %v", t)
		}
		return p.writeRegister(e.RegisterEntry)
	case *p4v1.Entity_CounterEntry:
		if t != p4v1.Update_MODIFY {
			return errf(codes.InvalidArgument, "counter entries can only be modified, not %v", t)
		}
		return p.writeCounter(e.CounterEntry)
	case nil:
		return errf(codes.InvalidArgument, "update without an entity")
	default:
		return errf(codes.Unimplemented, "entity %T is not supported by the INA pipeline", e)
	}
}

// decoded is a validated table entry.
type decoded struct {
	key    string
	fields map[string][2]uint64 // exact: {v, v}; range: {lo, hi}; lpm: {v, prefix}
	action string
	params map[string]uint64
}

func (p *Pipeline) decode(te *p4v1.TableEntry, needAction bool) (*decoded, *p4configv1.Table, error) {
	t := p.ids.tables[te.GetTableId()]
	if t == nil {
		return nil, nil, errf(codes.NotFound, "no table with id %#x", te.GetTableId())
	}
	tname := t.GetPreamble().GetName()
	if te.GetIsDefaultAction() {
		return nil, nil, errf(codes.Unimplemented, "table %s: the default action is fixed", tname)
	}
	d := &decoded{fields: map[string][2]uint64{}, params: map[string]uint64{}}
	var key strings.Builder
	fmt.Fprintf(&key, "%d", te.GetTableId())
	needPrio := false
	byID := map[uint32]*p4v1.FieldMatch{}
	for _, m := range te.GetMatch() {
		if byID[m.GetFieldId()] != nil {
			return nil, nil, errf(codes.InvalidArgument, "table %s: field id %d given twice", tname, m.GetFieldId())
		}
		byID[m.GetFieldId()] = m
	}
	for _, mf := range t.GetMatchFields() {
		w := int(mf.GetBitwidth())
		m := byID[mf.GetId()]
		delete(byID, mf.GetId())
		var v [2]uint64
		var err error
		switch mf.GetMatchType() {
		case p4configv1.MatchField_EXACT:
			if m.GetExact() == nil {
				return nil, nil, errf(codes.InvalidArgument, "table %s: exact field %q missing", tname, mf.GetName())
			}
			v[0], err = p4rt.DecodeUint(m.GetExact().GetValue(), w)
			v[1] = v[0]
		case p4configv1.MatchField_RANGE:
			needPrio = true
			v[1] = 1<<uint(w) - 1
			if m != nil {
				if m.GetRange() == nil {
					return nil, nil, errf(codes.InvalidArgument, "table %s: field %q is a range", tname, mf.GetName())
				}
				v[0], err = p4rt.DecodeUint(m.GetRange().GetLow(), w)
				if err == nil {
					v[1], err = p4rt.DecodeUint(m.GetRange().GetHigh(), w)
				}
				if err == nil && v[0] > v[1] {
					err = fmt.Errorf("low %d above high %d", v[0], v[1])
				}
			}
		case p4configv1.MatchField_LPM:
			if m != nil {
				if m.GetLpm() == nil {
					return nil, nil, errf(codes.InvalidArgument, "table %s: field %q is lpm", tname, mf.GetName())
				}
				v[0], err = p4rt.DecodeUint(m.GetLpm().GetValue(), w)
				v[1] = uint64(m.GetLpm().GetPrefixLen())
				if err == nil && (v[1] < 1 || int(v[1]) > w) {
					err = fmt.Errorf("prefix length %d outside 1..%d", v[1], w)
				}
			}
		default:
			return nil, nil, errf(codes.Unimplemented, "table %s: match kind %v", tname, mf.GetMatchType())
		}
		if err != nil {
			return nil, nil, errf(codes.InvalidArgument, "table %s: field %q: %v", tname, mf.GetName(), err)
		}
		d.fields[mf.GetName()] = v
		fmt.Fprintf(&key, "/%d-%d", v[0], v[1])
	}
	for _, m := range te.GetMatch() { // in message order, so the error is deterministic
		if byID[m.GetFieldId()] != nil {
			return nil, nil, errf(codes.InvalidArgument, "table %s has no match field with id %d", tname, m.GetFieldId())
		}
	}
	if needPrio && te.GetPriority() <= 0 {
		return nil, nil, errf(codes.InvalidArgument, "table %s: entries need a positive priority", tname)
	}
	if !needPrio && te.GetPriority() != 0 {
		return nil, nil, errf(codes.InvalidArgument, "table %s: priority %d on a table without range fields", tname, te.GetPriority())
	}
	fmt.Fprintf(&key, "/p%d", te.GetPriority())
	d.key = key.String()
	if !needAction {
		return d, t, nil
	}
	a := te.GetAction().GetAction()
	if a == nil {
		return nil, nil, errf(codes.InvalidArgument, "table %s: entry without a direct action", tname)
	}
	act := p.ids.actions[a.GetActionId()]
	allowed := false
	for _, ref := range t.GetActionRefs() {
		if ref.GetId() == a.GetActionId() && ref.GetScope() != p4configv1.ActionRef_DEFAULT_ONLY {
			allowed = true
		}
	}
	if act == nil || !allowed {
		return nil, nil, errf(codes.InvalidArgument, "table %s cannot run action id %#x", tname, a.GetActionId())
	}
	d.action = act.GetPreamble().GetName()
	given := map[uint32]*p4v1.Action_Param{}
	for _, ap := range a.GetParams() {
		if given[ap.GetParamId()] != nil {
			return nil, nil, errf(codes.InvalidArgument, "action %s: parameter id %d given twice", d.action, ap.GetParamId())
		}
		given[ap.GetParamId()] = ap
	}
	for _, ip := range act.GetParams() {
		ap := given[ip.GetId()]
		delete(given, ip.GetId())
		if ap == nil {
			return nil, nil, errf(codes.InvalidArgument, "action %s: parameter %q missing", d.action, ip.GetName())
		}
		v, err := p4rt.DecodeUint(ap.GetValue(), int(ip.GetBitwidth()))
		if err != nil {
			return nil, nil, errf(codes.InvalidArgument, "action %s: parameter %q: %v", d.action, ip.GetName(), err)
		}
		d.params[ip.GetName()] = v
	}
	for _, ap := range a.GetParams() {
		if given[ap.GetParamId()] != nil {
			return nil, nil, errf(codes.InvalidArgument, "action %s has no parameter with id %d", d.action, ap.GetParamId())
		}
	}
	return d, t, nil
}

func (p *Pipeline) writeTable(t p4v1.Update_Type, te *p4v1.TableEntry) error {
	d, _, err := p.decode(te, t != p4v1.Update_DELETE)
	if err != nil {
		return err
	}
	old := p.entries[d.key]
	if err := p4rt.CheckExistence(t, old != nil, "such entry"); err != nil {
		return err
	}
	switch te.GetTableId() {
	case p.ids.jobs:
		return p.writeJob(t, d, te, old)
	case p.ids.routes:
		return p.writeRoute(t, d, te, old)
	case p.ids.replicas:
		return p.writeReplica(t, d, te, old)
	case p.ids.local:
		// The Go twin's address comes from the topology; the entries are
		// kept for reads, so one controller drives both twins.
		if t == p4v1.Update_INSERT {
			p.store(t, d, te, nil, &storedEntry{})
		} else {
			p.store(t, d, te, old, nil)
		}
		return nil
	}
	return errf(codes.NotFound, "no table with id %#x", te.GetTableId())
}

func (p *Pipeline) store(t p4v1.Update_Type, d *decoded, te *p4v1.TableEntry, old, s *storedEntry) {
	switch t {
	case p4v1.Update_DELETE:
		delete(p.entries, d.key)
	case p4v1.Update_MODIFY:
		old.te = proto.Clone(te).(*p4v1.TableEntry)
	default:
		p.seq++
		s.seq, s.te = p.seq, proto.Clone(te).(*p4v1.TableEntry)
		p.entries[d.key] = s
	}
}

func (p *Pipeline) writeJob(t p4v1.Update_Type, d *decoded, te *p4v1.TableEntry, old *storedEntry) error {
	job := uint16(d.fields[FieldJob][0])
	if job >= MaxJobs {
		return errf(codes.InvalidArgument, "job %d: job ids go up to %d", job, MaxJobs-1)
	}
	if t == p4v1.Update_DELETE {
		p.jobs[job] = slices.DeleteFunc(p.jobs[job], func(e *jobEntry) bool { return e == old.job })
		p.store(t, d, te, old, nil)
		return nil
	}
	r := d.fields[FieldRound]
	b := Binding{
		Job: job, FromRound: uint32(r[0]), ToRound: uint32(r[1]),
		Mode: uint8(d.params[ParamMode]), Gen: uint32(d.params[ParamGen]),
		Base: uint32(d.params[ParamBase]), Size: uint32(d.params[ParamSize]),
		Workers: uint8(d.params[ParamWorkers]), Group: uint16(d.params[ParamGroup]),
	}
	if d.params[ParamPSAddr] != 0 || d.params[ParamPSPort] != 0 {
		b.PS = netip.AddrPortFrom(ipv4(uint32(d.params[ParamPSAddr])), uint16(d.params[ParamPSPort]))
	}
	if err := b.Check(p.cfg.Aggregators); err != nil {
		return errf(codes.InvalidArgument, "%v", err)
	}
	e := &jobEntry{
		job: job, lo: b.FromRound, hi: b.ToRound, prio: te.GetPriority(), mode: b.Mode, gen: b.Gen,
		base: b.Base, size: b.Size, workers: b.Workers, all: AllWorkers(int(b.Workers)), group: b.Group,
	}
	if b.PS.IsValid() {
		e.psIP, e.psPort = b.PS.Addr().As4(), b.PS.Port()
	}
	if t == p4v1.Update_MODIFY {
		*old.job = *e
		p.store(t, d, te, old, nil)
		return nil
	}
	p.jobs[job] = append(p.jobs[job], e)
	slices.SortStableFunc(p.jobs[job], func(a, b *jobEntry) int { return int(b.prio) - int(a.prio) })
	p.store(t, d, te, nil, &storedEntry{job: e})
	return nil
}

func (p *Pipeline) writeRoute(t p4v1.Update_Type, d *decoded, te *p4v1.TableEntry, old *storedEntry) error {
	f := d.fields[FieldDst]
	if f[1] != 32 {
		return errf(codes.Unimplemented, "routes: the Go pipeline takes /32 routes only, not /%d", f[1])
	}
	dst := ipv4(uint32(f[0]))
	if t == p4v1.Update_DELETE {
		p.fwd.SetRoute(dst, old.route.prev)
		p.store(t, d, te, old, nil)
		return nil
	}
	var ports []int
	if d.action == ActionForward {
		ports = []int{int(d.params[ParamPort])}
	}
	if t == p4v1.Update_INSERT {
		rs := &routeState{dst: dst, prev: slices.Clone(p.fwd.Route(dst))}
		p.fwd.SetRoute(dst, ports)
		p.store(t, d, te, nil, &storedEntry{route: rs})
		return nil
	}
	p.fwd.SetRoute(dst, ports)
	p.store(t, d, te, old, nil)
	return nil
}

func (p *Pipeline) writeReplica(t p4v1.Update_Type, d *decoded, te *p4v1.TableEntry, old *storedEntry) error {
	key := uint32(d.fields[FieldGroup][0])<<16 | uint32(d.fields[FieldRID][0])
	if t == p4v1.Update_DELETE || d.action == ActionDropReplica {
		delete(p.replicas, key)
	} else {
		r := &replica{ip: ipv4(uint32(d.params[ParamAddr])).As4(), port: uint16(d.params[ParamPort])}
		putMAC(&r.dmac, d.params[ParamDstMAC])
		putMAC(&r.smac, d.params[ParamSrcMAC])
		p.replicas[key] = r
	}
	if t == p4v1.Update_INSERT {
		p.store(t, d, te, nil, &storedEntry{})
	} else {
		p.store(t, d, te, old, nil)
	}
	return nil
}

func putMAC(m *frame.MAC, v uint64) {
	for i := 5; i >= 0; i-- {
		m[i] = byte(v)
		v >>= 8
	}
}

func (p *Pipeline) writeGroup(t p4v1.Update_Type, g *p4v1.MulticastGroupEntry) error {
	id := g.GetMulticastGroupId()
	if id == 0 || id > 0xffff {
		return errf(codes.InvalidArgument, "multicast group id %d: want 1 to 65535", id)
	}
	old := p.groups[uint16(id)]
	if err := p4rt.CheckExistence(t, old != nil, fmt.Sprintf("multicast group %d", id)); err != nil {
		return err
	}
	if t == p4v1.Update_DELETE {
		delete(p.groups, uint16(id))
		return nil
	}
	ng := &group{}
	seen := map[[2]uint32]bool{}
	for _, r := range g.GetReplicas() {
		port, err := p4rt.ReplicaPort(r)
		if err != nil {
			return errf(codes.InvalidArgument, "multicast group %d: %v", id, err)
		}
		if port == 0 || port > 511 || r.GetInstance() > 0xffff {
			return errf(codes.InvalidArgument, "multicast group %d: replica (port %d, instance %d): ports are 1 to 511, instances 0 to 65535", id, port, r.GetInstance())
		}
		k := [2]uint32{port, r.GetInstance()}
		if seen[k] {
			return errf(codes.InvalidArgument, "multicast group %d: replica (port %d, instance %d) given twice", id, port, r.GetInstance())
		}
		seen[k] = true
		ng.reps = append(ng.reps, groupReplica{port: port, instance: r.GetInstance()})
	}
	p.groups[uint16(id)] = ng
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
	}
	return 0
}

func (p *Pipeline) regSet(ri regInfo, i int, v uint64) {
	switch ri.kind {
	case regBitmap:
		p.bitmap[i] = uint32(v)
	case regCount:
		p.count[i] = uint8(v)
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
	case regJobRound:
		p.jobRound[i] = uint32(v)
	case regJobWorkers:
		p.jobWorkers[i] = uint32(v)
	}
}

func (p *Pipeline) writeRegister(re *p4v1.RegisterEntry) error {
	ri, ok := p.ids.regs[re.GetRegisterId()]
	if !ok {
		return errf(codes.NotFound, "no register with id %#x", re.GetRegisterId())
	}
	bs := re.GetData().GetBitstring()
	if bs == nil {
		return errf(codes.InvalidArgument, "register %#x: data must be a bitstring", re.GetRegisterId())
	}
	v, err := p4rt.DecodeUint(bs, ri.width)
	if err != nil {
		return errf(codes.InvalidArgument, "register %#x: %v", re.GetRegisterId(), err)
	}
	if re.GetIndex() == nil {
		for i := range ri.size {
			p.regSet(ri, i, v)
		}
		return nil
	}
	i := re.GetIndex().GetIndex()
	if i < 0 || i >= int64(ri.size) {
		return errf(codes.OutOfRange, "register %#x: index %d outside 0..%d", re.GetRegisterId(), i, ri.size-1)
	}
	p.regSet(ri, int(i), v)
	return nil
}

func (p *Pipeline) counterCells(id uint32) []counterCell {
	switch p.ids.counters[id] {
	case CounterPackets:
		return p.packets[:]
	case CounterAggregated:
		return p.aggregated[:]
	case CounterResults:
		return p.results[:]
	case CounterCollisions:
		return p.collisions[:]
	case CounterOverflows:
		return p.overflows[:]
	case CounterJobDrops:
		return p.jobDrops[:]
	case CounterDrops:
		return p.drops[:]
	}
	return nil
}

func (p *Pipeline) writeCounter(ce *p4v1.CounterEntry) error {
	cells := p.counterCells(ce.GetCounterId())
	if cells == nil {
		return errf(codes.NotFound, "no counter with id %#x", ce.GetCounterId())
	}
	v := counterCell{pk: uint64(ce.GetData().GetPacketCount()), by: uint64(ce.GetData().GetByteCount())}
	if ce.GetIndex() == nil {
		for i := range cells {
			cells[i] = v
		}
		return nil
	}
	i := ce.GetIndex().GetIndex()
	if i < 0 || i >= int64(len(cells)) {
		return errf(codes.OutOfRange, "counter %#x: index %d outside 0..%d", ce.GetCounterId(), i, len(cells)-1)
	}
	cells[i] = v
	return nil
}

// Read implements p4rt.Device.
func (p *Pipeline) Read(q *p4v1.Entity, yield func(*p4v1.Entity) error) error {
	switch e := q.GetEntity().(type) {
	case *p4v1.Entity_TableEntry:
		return p.readTable(e.TableEntry, yield)
	case *p4v1.Entity_PacketReplicationEngineEntry:
		g := e.PacketReplicationEngineEntry.GetMulticastGroupEntry()
		if g == nil {
			return errf(codes.Unimplemented, "only multicast group entries of the packet replication engine are supported")
		}
		return p.readGroups(g.GetMulticastGroupId(), yield)
	case *p4v1.Entity_RegisterEntry:
		return p.readRegisters(e.RegisterEntry, yield)
	case *p4v1.Entity_CounterEntry:
		return p.readCounters(e.CounterEntry, yield)
	case nil:
		return errf(codes.InvalidArgument, "read without an entity")
	default:
		return errf(codes.Unimplemented, "entity %T is not supported by the INA pipeline", e)
	}
}

func (p *Pipeline) readTable(q *p4v1.TableEntry, yield func(*p4v1.Entity) error) error {
	if q.GetTableId() != 0 && p.ids.tables[q.GetTableId()] == nil {
		return errf(codes.NotFound, "no table with id %#x", q.GetTableId())
	}
	var want string
	if len(q.GetMatch()) > 0 {
		d, _, err := p.decode(q, false)
		if err != nil {
			return err
		}
		want = d.key
	}
	var out []*storedEntry
	for key, s := range p.entries {
		if (q.GetTableId() == 0 || s.te.GetTableId() == q.GetTableId()) && (want == "" || key == want) {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b *storedEntry) int { return int(int64(a.seq) - int64(b.seq)) })
	for _, s := range out {
		if err := yield(p4rt.Table(proto.Clone(s.te).(*p4v1.TableEntry))); err != nil {
			return err
		}
	}
	return nil
}

func (p *Pipeline) readGroups(id uint32, yield func(*p4v1.Entity) error) error {
	var gs []uint16
	if id != 0 {
		if id > 0xffff || p.groups[uint16(id)] == nil {
			return errf(codes.NotFound, "no multicast group %d", id)
		}
		gs = []uint16{uint16(id)}
	} else {
		for g := range p.groups {
			gs = append(gs, g)
		}
		slices.Sort(gs)
	}
	for _, g := range gs {
		var reps []p4rt.Replica
		for _, r := range p.groups[g].reps {
			reps = append(reps, p4rt.Replica{Port: r.port, Instance: r.instance})
		}
		if err := yield(p4rt.MulticastGroup(uint32(g), reps)); err != nil {
			return err
		}
	}
	return nil
}

func (p *Pipeline) readRegisters(q *p4v1.RegisterEntry, yield func(*p4v1.Entity) error) error {
	regs := p.ids.regOrder
	if q.GetRegisterId() != 0 {
		if _, ok := p.ids.regs[q.GetRegisterId()]; !ok {
			return errf(codes.NotFound, "no register with id %#x", q.GetRegisterId())
		}
		regs = []uint32{q.GetRegisterId()}
	}
	for _, id := range regs {
		ri := p.ids.regs[id]
		lo, hi := 0, ri.size
		if q.GetIndex() != nil {
			i := q.GetIndex().GetIndex()
			if i < 0 || i >= int64(ri.size) {
				return errf(codes.OutOfRange, "register %#x: index %d outside 0..%d", id, i, ri.size-1)
			}
			lo, hi = int(i), int(i)+1
		}
		for i := lo; i < hi; i++ {
			e := &p4v1.RegisterEntry{RegisterId: id, Index: &p4v1.Index{Index: int64(i)},
				Data: &p4v1.P4Data{Data: &p4v1.P4Data_Bitstring{Bitstring: p4rt.EncodeUint(p.regGet(ri, i))}}}
			if err := yield(p4rt.Register(e)); err != nil {
				return err
			}
		}
	}
	return nil
}

func (p *Pipeline) readCounters(q *p4v1.CounterEntry, yield func(*p4v1.Entity) error) error {
	ids := p.ids.counterOrder
	if q.GetCounterId() != 0 {
		if p.counterCells(q.GetCounterId()) == nil {
			return errf(codes.NotFound, "no counter with id %#x", q.GetCounterId())
		}
		ids = []uint32{q.GetCounterId()}
	}
	for _, id := range ids {
		cells := p.counterCells(id)
		lo, hi := 0, len(cells)
		if q.GetIndex() != nil {
			i := q.GetIndex().GetIndex()
			if i < 0 || i >= int64(len(cells)) {
				return errf(codes.OutOfRange, "counter %#x: index %d outside 0..%d", id, i, len(cells)-1)
			}
			lo, hi = int(i), int(i)+1
		}
		for i := lo; i < hi; i++ {
			e := &p4v1.CounterEntry{CounterId: id, Index: &p4v1.Index{Index: int64(i)},
				Data: &p4v1.CounterData{PacketCount: int64(cells[i].pk), ByteCount: int64(cells[i].by)}}
			if err := yield(&p4v1.Entity{Entity: &p4v1.Entity_CounterEntry{CounterEntry: e}}); err != nil {
				return err
			}
		}
	}
	return nil
}
