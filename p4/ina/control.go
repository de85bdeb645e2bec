package ina

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tracebed/tracebed/emulator/frame"
	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/topologies"
)

// MaxRound is the open end of a binding's round range.
const MaxRound = math.MaxUint32

// Binding is one entry of the job table: packets of job Job whose round lies
// in [FromRound, ToRound] aggregate in the pool [Base, Base+Size) of the
// switch, in mode Mode. A job has one open-ended binding (ToRound = MaxRound)
// and, while it is being moved, older bindings that cover the rounds still in
// flight (see Controller.Rebind and docs/ina-dataplane.md).
type Binding struct {
	Job       uint16
	FromRound uint32
	ToRound   uint32
	Mode      uint8
	// Gen tags the aggregator cells the binding writes; cells with another
	// generation are treated as empty (pool mode) or held by another job
	// (shared mode). It must be nonzero and unique on the switch.
	Gen     uint32
	Base    uint32
	Size    uint32
	Workers uint8
	// Group is the multicast group of the job's workers (SetGroup).
	Group uint16
	// PS is the job's parameter server: where collisions and flushes go in
	// shared mode. The zero value means none.
	PS netip.AddrPort
	// Members is the bitmap of the workers whose contributions this switch
	// completes; 0 means all Workers. Up is the switch above this one in
	// the job's aggregation tree (its address; INA port), the zero value
	// for the top. In two-level aggregation a rack's ToR has Members = its
	// rack's workers and Up = the top switch: it sums its rack's
	// contributions and sends them up as one partial aggregate; the top
	// sums the racks' partials and multicasts the result down through the
	// ToRs, which keep it to answer their workers' retransmissions
	// (docs/ina-dataplane.md, "Two-level aggregation").
	Members uint32
	Up      netip.Addr
	// Hold is when a shared-mode aggregator is released: HoldCompletion
	// (the default) or HoldReturn. Place is how a shared-mode chunk finds
	// its aggregator: PlaceHash (the default) or PlaceSlot.
	Hold  uint8
	Place uint8
	// Epoch is the job's incarnation on the switch: the first packet of a
	// binding of another epoch than the job's last resets the job's
	// progress (Progress), so that a reused job id starts afresh. Bind
	// gives a job its Gen as epoch when Epoch is 0; Rebind keeps the
	// job's epoch.
	Epoch uint32
}

// Contributors returns the bitmap of the workers whose contributions the
// switch completes: Members, or all the job's workers.
func (b Binding) Contributors() uint32 {
	if b.Members != 0 {
		return b.Members
	}
	return AllWorkers(int(b.Workers))
}

// Check validates b against a switch with the given number of aggregators.
func (b Binding) Check(aggregators int) error {
	switch {
	case b.Job >= MaxJobs:
		return fmt.Errorf("binding: job %d, want below %d", b.Job, MaxJobs)
	case b.FromRound > b.ToRound:
		return fmt.Errorf("binding of job %d: rounds %d..%d are empty", b.Job, b.FromRound, b.ToRound)
	case b.Mode != ModePool && b.Mode != ModeShared:
		return fmt.Errorf("binding of job %d: mode %d, want %d (pool) or %d (shared)", b.Job, b.Mode, ModePool, ModeShared)
	case b.Gen == 0:
		return fmt.Errorf("binding of job %d: generation 0 is reserved for free cells", b.Job)
	case b.Size == 0 || uint64(b.Base)+uint64(b.Size) > uint64(aggregators):
		return fmt.Errorf("binding of job %d: pool [%d, %d) outside the switch's %d aggregators", b.Job, b.Base, uint64(b.Base)+uint64(b.Size), aggregators)
	case b.Workers == 0 || b.Workers > MaxWorkers:
		return fmt.Errorf("binding of job %d: %d workers, want 1 to %d", b.Job, b.Workers, MaxWorkers)
	case b.Mode == ModeShared && !b.PS.IsValid():
		return fmt.Errorf("binding of job %d: shared mode needs a parameter server", b.Job)
	case b.PS.IsValid() && !b.PS.Addr().Is4():
		return fmt.Errorf("binding of job %d: parameter server %v is not IPv4", b.Job, b.PS)
	case b.Members&^AllWorkers(int(b.Workers)) != 0:
		return fmt.Errorf("binding of job %d: members %#x are not a subset of its %d workers (%#x)", b.Job, b.Members, b.Workers, AllWorkers(int(b.Workers)))
	case b.Up.IsValid() && (!b.Up.Is4() || b.Up.IsUnspecified()):
		return fmt.Errorf("binding of job %d: upstream switch %v is not an IPv4 address", b.Job, b.Up)
	case b.Hold != HoldCompletion && b.Hold != HoldReturn:
		return fmt.Errorf("binding of job %d: hold %d, want %d (completion) or %d (return)", b.Job, b.Hold, HoldCompletion, HoldReturn)
	case b.Hold == HoldReturn && b.Mode != ModeShared:
		return fmt.Errorf("binding of job %d: release on return applies to shared mode only", b.Job)
	case b.Place != PlaceHash && b.Place != PlaceSlot:
		return fmt.Errorf("binding of job %d: place %d, want %d (hash) or %d (slot)", b.Job, b.Place, PlaceHash, PlaceSlot)
	case b.Place == PlaceSlot && b.Mode != ModeShared:
		return fmt.Errorf("binding of job %d: aggregators named by the slot field need shared mode", b.Job)
	}
	return nil
}

// Entry returns b as an entry of TableJobs.
func (b Binding) Entry(n *p4rt.Names) (*p4v1.TableEntry, error) {
	var ps, up uint64
	if b.PS.IsValid() {
		ps = uint64(ipv4Uint(b.PS.Addr()))
	}
	if b.Up.IsValid() {
		up = uint64(ipv4Uint(b.Up))
	}
	return n.TableEntry(TableJobs,
		[]p4rt.Match{p4rt.Exact(FieldJob, uint64(b.Job)), p4rt.Range(FieldRound, uint64(b.FromRound), uint64(b.ToRound))},
		ActionBind, []p4rt.Arg{
			p4rt.P(ParamMode, uint64(b.Mode)), p4rt.P(ParamGen, uint64(b.Gen)),
			p4rt.P(ParamBase, uint64(b.Base)), p4rt.P(ParamSize, uint64(b.Size)),
			p4rt.P(ParamWorkers, uint64(b.Workers)), p4rt.P(ParamGroup, uint64(b.Group)),
			p4rt.P(ParamPSAddr, ps), p4rt.P(ParamPSPort, uint64(b.PS.Port())),
			p4rt.P(ParamMembers, uint64(b.Members)), p4rt.P(ParamUpAddr, up), p4rt.P(ParamHold, uint64(b.Hold)),
			p4rt.P(ParamPlace, uint64(b.Place)), p4rt.P(ParamEpoch, uint64(b.Epoch)),
		}, 1)
}

// ParseBinding decodes an entry of TableJobs.
func ParseBinding(n *p4rt.Names, te *p4v1.TableEntry) (Binding, error) {
	var b Binding
	tid, err := n.TableID(TableJobs)
	if err != nil {
		return b, err
	}
	if te.GetTableId() != tid {
		return b, fmt.Errorf("entry of table %#x is not a job binding", te.GetTableId())
	}
	jobID, _ := n.MatchFieldID(TableJobs, FieldJob)
	roundID, _ := n.MatchFieldID(TableJobs, FieldRound)
	b.ToRound = MaxRound // an omitted range field matches every round
	for _, m := range te.GetMatch() {
		switch m.GetFieldId() {
		case jobID:
			v, err := p4rt.DecodeUint(m.GetExact().GetValue(), 16)
			if err != nil {
				return b, fmt.Errorf("job binding: %s: %w", FieldJob, err)
			}
			b.Job = uint16(v)
		case roundID:
			lo, err := p4rt.DecodeUint(m.GetRange().GetLow(), 32)
			if err != nil {
				return b, fmt.Errorf("job binding: %s low: %w", FieldRound, err)
			}
			hi, err := p4rt.DecodeUint(m.GetRange().GetHigh(), 32)
			if err != nil {
				return b, fmt.Errorf("job binding: %s high: %w", FieldRound, err)
			}
			b.FromRound, b.ToRound = uint32(lo), uint32(hi)
		}
	}
	act := te.GetAction().GetAction()
	bindID, _ := n.ActionID(ActionBind)
	if act.GetActionId() != bindID {
		return b, fmt.Errorf("job binding runs action %#x, not %s", act.GetActionId(), ActionBind)
	}
	bindAct, err := n.Action(ActionBind)
	if err != nil {
		return b, err
	}
	params := map[uint32]*p4configv1.Action_Param{}
	for _, ap := range bindAct.GetParams() {
		params[ap.GetId()] = ap
	}
	var psAddr, psPort uint64
	for _, p := range act.GetParams() {
		ap := params[p.GetParamId()]
		if ap == nil {
			return b, fmt.Errorf("job binding: param id %d is not a parameter of %s", p.GetParamId(), ActionBind)
		}
		// Each value is decoded at its parameter's width, so that a value
		// too wide for it is an error rather than a truncated binding.
		name := ap.GetName()
		v, err := p4rt.DecodeUint(p.GetValue(), int(ap.GetBitwidth()))
		if err != nil {
			return b, fmt.Errorf("job binding: param %q: %w", name, err)
		}
		switch name {
		case ParamMode:
			b.Mode = uint8(v)
		case ParamGen:
			b.Gen = uint32(v)
		case ParamBase:
			b.Base = uint32(v)
		case ParamSize:
			b.Size = uint32(v)
		case ParamWorkers:
			b.Workers = uint8(v)
		case ParamGroup:
			b.Group = uint16(v)
		case ParamPSAddr:
			psAddr = v
		case ParamPSPort:
			psPort = v
		case ParamMembers:
			b.Members = uint32(v)
		case ParamUpAddr:
			if v != 0 {
				b.Up = ipv4(uint32(v))
			}
		case ParamHold:
			b.Hold = uint8(v)
		case ParamPlace:
			b.Place = uint8(v)
		case ParamEpoch:
			b.Epoch = uint32(v)
		}
	}
	switch {
	case psAddr != 0:
		b.PS = netip.AddrPortFrom(ipv4(uint32(psAddr)), uint16(psPort))
	case psPort != 0:
		// A Binding has no place for a port without an address.
		return b, fmt.Errorf("job binding: %s %d without a %s", ParamPSPort, psPort, ParamPSAddr)
	}
	return b, nil
}

func ipv4(v uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

func ipv4Uint(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func macUint(m frame.MAC) uint64 {
	var v uint64
	for _, c := range m {
		v = v<<8 | uint64(c)
	}
	return v
}

// Member is one worker of a multicast group: the switch port a result copy
// leaves on towards the worker, the worker's UDP address and the Ethernet
// addresses of the link behind the port.
type Member struct {
	Port           uint32
	Addr           netip.AddrPort
	SrcMAC, DstMAC frame.MAC
}

// Members computes the group members of workers for switch sw of top: each
// copy leaves on the first shortest-path port towards the worker, so results
// reach workers several hops away.
func Members(top *topologies.Topology, sw string, workers []netip.AddrPort) ([]Member, error) {
	node := top.Node(sw)
	if node == nil || node.IsHost() {
		return nil, fmt.Errorf("members: %q is not a switch of %s", sw, top.Name)
	}
	routes := top.Routes()[sw]
	var out []Member
	for _, w := range workers {
		ports := routes[w.Addr()]
		if len(ports) == 0 {
			return nil, fmt.Errorf("members: switch %s has no route to worker %v", sw, w)
		}
		p := node.Ports[ports[0]-1]
		out = append(out, Member{Port: uint32(p.Num), Addr: w, SrcMAC: p.MAC, DstMAC: p.Peer.MAC})
	}
	return out, nil
}

// TreeSwitch is one switch of a job's aggregation tree as the data plane
// sees it: the Members and Up of its binding, and its multicast group.
type TreeSwitch struct {
	Name string
	// Members are the workers whose contributions the switch completes
	// (0: all, the top); Up is the top's address (lower switches only).
	Members uint32
	Up      netip.Addr
	// Group is where the switch multicasts results: the top of a
	// two-level tree to the lower switches (at the INA port), every other
	// switch to its workers.
	Group []Member
}

// Tree plans a job's aggregation tree on top: the workers (by worker id)
// aggregate at root, in one level when lower is empty, or in two levels
// through the lower switches, each the ToR (the switch a host's uplink
// reaches) of some of the workers, every worker under one of them. The
// root comes first in the result, then lower in order.
func Tree(top *topologies.Topology, root string, lower []string, workers []netip.AddrPort) ([]TreeSwitch, error) {
	rn := top.Node(root)
	if rn == nil || rn.IsHost() {
		return nil, fmt.Errorf("tree: %q is not a switch of %s", root, top.Name)
	}
	if len(workers) == 0 || len(workers) > MaxWorkers {
		return nil, fmt.Errorf("tree: %d workers, want 1 to %d", len(workers), MaxWorkers)
	}
	if len(lower) == 0 {
		g, err := Members(top, root, workers)
		if err != nil {
			return nil, err
		}
		return []TreeSwitch{{Name: root, Group: g}}, nil
	}
	out := []TreeSwitch{{Name: root}}
	var ups []netip.AddrPort
	for _, l := range lower {
		n := top.Node(l)
		if n == nil || n.IsHost() || n == rn {
			return nil, fmt.Errorf("tree: lower switch %q is not a switch of %s below %s", l, top.Name, root)
		}
		ups = append(ups, netip.AddrPortFrom(n.IP, Port))
		out = append(out, TreeSwitch{Name: l, Up: rn.IP})
	}
	g, err := Members(top, root, ups)
	if err != nil {
		return nil, err
	}
	out[0].Group = g
	racks := make([][]netip.AddrPort, len(lower))
	for i, w := range workers {
		h := top.NodeByIP(w.Addr())
		if h == nil || !h.IsHost() {
			return nil, fmt.Errorf("tree: worker %d (%v) is not a host of %s", i, w, top.Name)
		}
		k := slices.Index(lower, h.Uplink().Node.Name)
		if k < 0 {
			return nil, fmt.Errorf("tree: worker %d (%s) is under none of the lower switches %v", i, h.Name, lower)
		}
		out[1+k].Members |= 1 << i
		racks[k] = append(racks[k], w)
	}
	for k, l := range lower {
		if len(racks[k]) == 0 {
			return nil, fmt.Errorf("tree: lower switch %s has none of the job's workers", l)
		}
		if out[1+k].Group, err = Members(top, l, racks[k]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Controller programs the INA data plane of one switch through P4Runtime.
// It keeps no state of its own: everything it needs it reads back from the
// switch, so several controllers (or a restarted one) agree.
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

// GroupUpdates returns the updates that create (INSERT) or replace (MODIFY)
// multicast group g with members: the group itself (replica i has instance
// i+1) and one TableReplicas entry per replica.
func (c *Controller) GroupUpdates(t p4v1.Update_Type, g uint16, members []Member) ([]*p4v1.Update, error) {
	if g == 0 {
		return nil, fmt.Errorf("multicast group 0 is reserved")
	}
	var reps []p4rt.Replica
	var ups []*p4v1.Update
	for i, m := range members {
		if !m.Addr.Addr().Is4() {
			return nil, fmt.Errorf("group %d: member %v is not IPv4", g, m.Addr)
		}
		reps = append(reps, p4rt.Replica{Port: m.Port, Instance: uint32(i + 1)})
		te, err := c.n.TableEntry(TableReplicas,
			[]p4rt.Match{p4rt.Exact(FieldGroup, uint64(g)), p4rt.Exact(FieldRID, uint64(i+1))},
			ActionReplica, []p4rt.Arg{
				p4rt.P(ParamAddr, uint64(ipv4Uint(m.Addr.Addr()))), p4rt.P(ParamPort, uint64(m.Addr.Port())),
				p4rt.P(ParamDstMAC, macUint(m.DstMAC)), p4rt.P(ParamSrcMAC, macUint(m.SrcMAC)),
			}, 0)
		if err != nil {
			return nil, err
		}
		ups = append(ups, &p4v1.Update{Type: t, Entity: p4rt.Table(te)})
	}
	return append([]*p4v1.Update{{Type: t, Entity: p4rt.MulticastGroup(uint32(g), reps)}}, ups...), nil
}

// SetGroup creates multicast group g with members.
func (c *Controller) SetGroup(ctx context.Context, g uint16, members []Member) error {
	ups, err := c.GroupUpdates(p4v1.Update_INSERT, g, members)
	if err != nil {
		return err
	}
	return c.c.Write(ctx, ups...)
}

// DeleteGroup removes multicast group g and its replica entries; n is the
// number of members it was created with.
func (c *Controller) DeleteGroup(ctx context.Context, g uint16, n int) error {
	ups := []*p4v1.Update{p4rt.Delete(p4rt.MulticastGroup(uint32(g), nil))}
	for i := range n {
		te, err := c.n.TableEntry(TableReplicas,
			[]p4rt.Match{p4rt.Exact(FieldGroup, uint64(g)), p4rt.Exact(FieldRID, uint64(i+1))},
			ActionReplica, []p4rt.Arg{p4rt.P(ParamAddr, 0), p4rt.P(ParamPort, 0), p4rt.P(ParamDstMAC, 0), p4rt.P(ParamSrcMAC, 0)}, 0)
		if err != nil {
			return err
		}
		ups = append(ups, p4rt.Delete(p4rt.Table(te)))
	}
	return c.c.Write(ctx, ups...)
}

// Bind installs b, a new incarnation of its job: its epoch (b.Epoch, or
// b.Gen when 0) differs from any earlier binding's of the job id, so the
// switch starts the job's progress afresh with its first packet (Progress
// reads zero until then). Bind writes no register: bmv2's P4Runtime server
// (PI) implements no register access (docs/bmv2.md).
func (c *Controller) Bind(ctx context.Context, b Binding) error {
	if b.Epoch == 0 {
		b.Epoch = b.Gen
	}
	te, err := b.Entry(c.n)
	if err != nil {
		return err
	}
	return c.c.Write(ctx, p4rt.Insert(p4rt.Table(te)))
}

// registersRefused reports whether err is a switch's refusal of register
// access (UNIMPLEMENTED for every update of a batch, or for a read), as
// bmv2's PI answers it.
func registersRefused(err error) bool {
	var be *p4rt.BatchError
	if !errors.As(err, &be) {
		return status.Code(err) == codes.Unimplemented
	}
	for _, e := range be.Errs {
		if e != nil && status.Code(e) != codes.Unimplemented {
			return false
		}
	}
	return true
}

// Bindings returns the job's bindings, ordered by FromRound.
func (c *Controller) Bindings(ctx context.Context, job uint16) ([]Binding, error) {
	q, err := c.n.TableQuery(TableJobs)
	if err != nil {
		return nil, err
	}
	ents, err := c.c.Read(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", TableJobs, err)
	}
	var out []Binding
	for _, e := range ents {
		b, err := ParseBinding(c.n, e.GetTableEntry())
		if err != nil {
			return nil, err
		}
		if b.Job == job {
			out = append(out, b)
		}
	}
	slices.SortFunc(out, func(a, b Binding) int { return int(int64(a.FromRound) - int64(b.FromRound)) })
	return out, nil
}

// Progress reads the highest round the switch has seen from the job's
// workers and the bitmap of the workers seen in that round, since the
// first packet of the job's current epoch (zero before it). It reads them
// from CounterProgress, whose cells count the flips of each bit of the
// progress registers: P4Runtime servers that read no registers (bmv2's
// PI) read counters.
func (c *Controller) Progress(ctx context.Context, job uint16) (round, workers uint32, err error) {
	bs, err := c.Bindings(ctx, job)
	if err != nil {
		return 0, 0, err
	}
	if len(bs) == 0 {
		return 0, 0, fmt.Errorf("progress of job %d: the job has no binding", job)
	}
	id, err := c.n.CounterID(CounterProgress)
	if err != nil {
		return 0, 0, err
	}
	qs := make([]*p4v1.Entity, ProgressCells)
	base := int64(job) * ProgressCells
	for i := range qs {
		qs[i] = counterEntity(id, base+int64(i))
	}
	ents, err := c.c.Read(ctx, qs...)
	if err != nil {
		return 0, 0, fmt.Errorf("progress of job %d: %w", job, err)
	}
	var regs [3]uint32 // round, workers, epoch
	for _, e := range ents {
		ce := e.GetCounterEntry()
		i := ce.GetIndex().GetIndex() - base
		if i < 0 || i >= ProgressCells {
			continue
		}
		regs[i/32] |= uint32(ce.GetData().GetPacketCount()&1) << (i % 32)
	}
	if regs[2] != bs[len(bs)-1].Epoch {
		return 0, 0, nil // nothing seen since the job's epoch began
	}
	return regs[0], regs[1], nil
}

func counterEntity(id uint32, index int64) *p4v1.Entity {
	return &p4v1.Entity{Entity: &p4v1.Entity_CounterEntry{CounterEntry: &p4v1.CounterEntry{CounterId: id, Index: &p4v1.Index{Index: index}}}}
}

// ReadRegister reads one cell of the named register.
func (c *Controller) ReadRegister(ctx context.Context, reg string, index int64) (uint64, error) {
	q, err := c.n.RegisterQuery(reg, index)
	if err != nil {
		return 0, err
	}
	ents, err := c.c.Read(ctx, q)
	if err != nil {
		return 0, fmt.Errorf("read %s[%d]: %w", reg, index, err)
	}
	if len(ents) != 1 {
		return 0, fmt.Errorf("read %s[%d]: %d entries", reg, index, len(ents))
	}
	return p4rt.DecodeUint(ents[0].GetRegisterEntry().GetData().GetBitstring(), 64)
}

// Rebind moves a job to next from the first round the switch has not seen
// yet, without touching rounds in flight: the open-ended binding is cut to
// end before that round and next covers it and every later round. Packets of
// the earlier rounds (retransmissions included) keep using the old pool,
// whose shadow copies still answer them. It returns the first round of
// next. next.Job, FromRound and ToRound are set by Rebind.
//
// On sim the read and the write happen within one event, so no packet can
// slip between them. A controller that talks to a switch over a network
// should pass margin > 0 rounds, then check with Progress that the switch
// has not yet seen round FromRound (and rebind again further ahead if it
// has).
func (c *Controller) Rebind(ctx context.Context, job uint16, next Binding, margin uint32) (uint32, error) {
	bs, err := c.Bindings(ctx, job)
	if err != nil {
		return 0, err
	}
	if len(bs) == 0 || bs[len(bs)-1].ToRound != MaxRound {
		return 0, fmt.Errorf("rebind: job %d has no open-ended binding", job)
	}
	cur := bs[len(bs)-1]
	seen, workers, err := c.Progress(ctx, job)
	if err != nil {
		return 0, err
	}
	from := seen + 1 + margin
	if workers == 0 {
		from = seen + margin // nothing seen at all since Bind
	}
	from = max(from, cur.FromRound)
	next.Job, next.FromRound, next.ToRound, next.Epoch = job, from, MaxRound, cur.Epoch
	old, err := cur.Entry(c.n)
	if err != nil {
		return 0, err
	}
	ne, err := next.Entry(c.n)
	if err != nil {
		return 0, err
	}
	ups := []*p4v1.Update{p4rt.Delete(p4rt.Table(old))}
	if from > cur.FromRound {
		cut := cur
		cut.ToRound = from - 1
		ce, err := cut.Entry(c.n)
		if err != nil {
			return 0, err
		}
		ups = append(ups, p4rt.Insert(p4rt.Table(ce)))
	}
	ups = append(ups, p4rt.Insert(p4rt.Table(ne)))
	if err := c.c.Write(ctx, ups...); err != nil {
		return 0, fmt.Errorf("rebind job %d: %w", job, err)
	}
	return from, nil
}

// Drained reports whether every worker of the job whose contributions the
// switch sees (members: Binding.Contributors; at the top of a two-level
// tree the racks' partials carry them) has entered round r, so no packet
// of an earlier round can still need the switch (each worker enters a
// round only after it holds every result of the previous one).
func (c *Controller) Drained(ctx context.Context, job uint16, members uint32, r uint32) (bool, error) {
	seen, bits, err := c.Progress(ctx, job)
	if err != nil {
		return false, err
	}
	switch {
	case int32(seen-r) > 0:
		return true, nil
	case seen == r:
		return bits&members == members, nil
	}
	return false, nil
}

// Retire deletes the job's bindings that end before its current open-ended
// binding once the job has drained into it, so their pools can be given to
// other jobs. It reports whether anything is left to retire.
func (c *Controller) Retire(ctx context.Context, job uint16) (pending bool, err error) {
	bs, err := c.Bindings(ctx, job)
	if err != nil || len(bs) < 2 {
		return false, err
	}
	cur := bs[len(bs)-1]
	ok, err := c.Drained(ctx, job, cur.Contributors(), cur.FromRound)
	if err != nil || !ok {
		return true, err
	}
	var ups []*p4v1.Update
	for _, b := range bs[:len(bs)-1] {
		te, err := b.Entry(c.n)
		if err != nil {
			return true, err
		}
		ups = append(ups, p4rt.Delete(p4rt.Table(te)))
	}
	return false, c.c.Write(ctx, ups...)
}

// Unbind deletes every binding of the job and frees the shared-mode cells
// its bindings still hold (a partial aggregate left by a lost or duplicated
// packet), so no other job ever sees them as busy. On a switch that
// refuses register writes (bmv2's PI) such cells stay held: a chunk of
// another job placed there goes to its parameter server, as any collision
// does, so sums stay exact; only that aggregator is lost to INA
// (docs/bmv2.md).
func (c *Controller) Unbind(ctx context.Context, job uint16) error {
	bs, err := c.Bindings(ctx, job)
	if err != nil {
		return err
	}
	var dels, ups []*p4v1.Update
	for _, b := range bs {
		te, err := b.Entry(c.n)
		if err != nil {
			return err
		}
		dels = append(dels, p4rt.Delete(p4rt.Table(te)))
		if b.Mode != ModeShared {
			continue
		}
		gens, err := c.readRange(ctx, RegGen, 2*int64(b.Base), 2*int64(b.Size))
		if registersRefused(errors.Unwrap(err)) {
			continue // held cells stay held: see above
		}
		if err != nil {
			return err
		}
		for i, gen := range gens {
			if i%2 != 0 || uint32(gen) != b.Gen { // shared mode uses copy 0
				continue
			}
			re, err := c.n.RegisterEntry(RegCount, 2*int64(b.Base)+int64(i), 0)
			if err != nil {
				return err
			}
			ups = append(ups, p4rt.Modify(p4rt.Register(re)))
		}
	}
	if len(dels) > 0 {
		if err := c.c.Write(ctx, dels...); err != nil {
			return err
		}
	}
	if len(ups) == 0 {
		return nil
	}
	if err := c.c.Write(ctx, ups...); err != nil && !registersRefused(err) {
		return err
	}
	return nil
}

// Cell is the state of one copy of one aggregator, as registers hold it.
type Cell struct {
	Bitmap, Gen, Round, Offset uint32
	Count                      uint8
	Overflow                   bool
	Values                     []int32
}

// readRange reads cells [from, from+n) of a register in one request.
func (c *Controller) readRange(ctx context.Context, reg string, from, n int64) ([]uint64, error) {
	qs := make([]*p4v1.Entity, 0, n)
	for i := range n {
		q, err := c.n.RegisterQuery(reg, from+i)
		if err != nil {
			return nil, err
		}
		qs = append(qs, q)
	}
	ents, err := c.c.Read(ctx, qs...)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", reg, err)
	}
	if int64(len(ents)) != n {
		return nil, fmt.Errorf("read %s: %d entries for %d cells", reg, len(ents), n)
	}
	out := make([]uint64, n)
	for i, e := range ents {
		v, err := p4rt.DecodeUint(e.GetRegisterEntry().GetData().GetBitstring(), 32)
		if err != nil {
			return nil, fmt.Errorf("read %s[%d]: %w", reg, from+int64(i), err)
		}
		out[i] = v
	}
	return out, nil
}

// ReadCells reads cells [from, from+n) (cell 2·a+v is copy v of aggregator
// a) with their k values, one request per register.
func (c *Controller) ReadCells(ctx context.Context, from, n int64, k int) ([]Cell, error) {
	out := make([]Cell, n)
	regs := []string{RegBitmap, RegCount, RegGen, RegRound, RegOffset, RegOverflow}
	for i := range k {
		regs = append(regs, fmt.Sprintf("%s%d", RegValuePrefix, i))
	}
	for ri, reg := range regs {
		vals, err := c.readRange(ctx, reg, from, n)
		if err != nil {
			return nil, err
		}
		for i, v := range vals {
			cl := &out[i]
			switch ri {
			case 0:
				cl.Bitmap = uint32(v)
			case 1:
				cl.Count = uint8(v)
			case 2:
				cl.Gen = uint32(v)
			case 3:
				cl.Round = uint32(v)
			case 4:
				cl.Offset = uint32(v)
			case 5:
				cl.Overflow = v != 0
			default:
				cl.Values = append(cl.Values, int32(uint32(v)))
			}
		}
	}
	return out, nil
}

// JobCounters are a job's counters.
type JobCounters struct {
	Packets, Bytes       uint64 // INA packets of the job at the switch
	Aggregated, AggBytes uint64 // contributions added in switch memory, and their value bytes
	Results, ResultBytes uint64 // result packets sent (each multicast copy counts)
	Collisions           uint64 // packets forwarded to the parameter server
	Overflows            uint64 // aggregates that overflowed int32
	Upward, UpwardBytes  uint64 // partials (and retransmissions) sent up the job's tree
	Drops                [NumJobDrops]uint64
}

// Counters reads the job's counters.
func (c *Controller) Counters(ctx context.Context, job uint16) (JobCounters, error) {
	var jc JobCounters
	read := func(name string, index int64) (*p4v1.CounterData, error) {
		q, err := c.n.CounterQuery(name, index)
		if err != nil {
			return nil, err
		}
		ents, err := c.c.Read(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("read %s[%d]: %w", name, index, err)
		}
		if len(ents) != 1 {
			return nil, fmt.Errorf("read %s[%d]: %d entries", name, index, len(ents))
		}
		return ents[0].GetCounterEntry().GetData(), nil
	}
	for _, f := range []struct {
		name   string
		pk, by *uint64
	}{
		{CounterPackets, &jc.Packets, &jc.Bytes},
		{CounterAggregated, &jc.Aggregated, &jc.AggBytes},
		{CounterResults, &jc.Results, &jc.ResultBytes},
		{CounterCollisions, &jc.Collisions, nil},
		{CounterOverflows, &jc.Overflows, nil},
		{CounterUpward, &jc.Upward, &jc.UpwardBytes},
	} {
		d, err := read(f.name, int64(job))
		if err != nil {
			return jc, err
		}
		*f.pk = uint64(d.GetPacketCount())
		if f.by != nil {
			*f.by = uint64(d.GetByteCount())
		}
	}
	for r := range NumJobDrops {
		d, err := read(CounterJobDrops, int64(job)*NumJobDrops+int64(r))
		if err != nil {
			return jc, err
		}
		jc.Drops[r] = uint64(d.GetPacketCount())
	}
	return jc, nil
}

// FrameCounts are the switch's frame accounting: every frame it received
// on a port is counted in exactly one of Forwarded (transit frames sent
// on), Drops (by reason: CounterDrops) and JobPackets (INA packets of a
// bound job, all jobs together).
type FrameCounts struct {
	Forwarded  uint64
	Drops      [NumDrops]uint64
	JobPackets uint64
}

// Total is the frames the counts account for.
func (f FrameCounts) Total() uint64 {
	n := f.Forwarded + f.JobPackets
	for _, d := range f.Drops {
		n += d
	}
	return n
}

// FrameCounts reads the switch's frame accounting (three wildcard counter
// reads).
func (c *Controller) FrameCounts(ctx context.Context) (FrameCounts, error) {
	var fc FrameCounts
	for _, name := range []string{CounterForwarded, CounterDrops, CounterPackets} {
		cells, err := p4rt.CounterPackets(ctx, c.c, c.n, name)
		if err != nil {
			return fc, err
		}
		for i, pk := range cells {
			switch name {
			case CounterForwarded:
				fc.Forwarded += pk
			case CounterDrops:
				if i >= 0 && i < NumDrops {
					fc.Drops[i] = pk
				}
			default:
				fc.JobPackets += pk
			}
		}
	}
	return fc, nil
}

// RouteUpdates returns the switch's own address (TableLocal) and TableRoutes
// entries (/32, first shortest-path port) for every address switch sw
// routes to. The Go pipeline already forwards by the topology; bmv2 needs
// these.
func (c *Controller) RouteUpdates(top *topologies.Topology, sw string) ([]*p4v1.Update, error) {
	node := top.Node(sw)
	if node == nil || node.IsHost() {
		return nil, fmt.Errorf("routes: %q is not a switch of %s", sw, top.Name)
	}
	routes := top.Routes()[sw]
	var dsts []netip.Addr
	for d := range routes {
		dsts = append(dsts, d)
	}
	slices.SortFunc(dsts, netip.Addr.Compare)
	self, err := c.n.TableEntry(TableLocal, []p4rt.Match{p4rt.Exact(FieldDst, uint64(ipv4Uint(node.IP)))}, ActionSetLocal, nil, 0)
	if err != nil {
		return nil, err
	}
	ups := []*p4v1.Update{p4rt.Insert(p4rt.Table(self))}
	for _, d := range dsts {
		p := node.Ports[routes[d][0]-1]
		te, err := c.n.TableEntry(TableRoutes, []p4rt.Match{p4rt.LPM(FieldDst, uint64(ipv4Uint(d)), 32)},
			ActionForward, []p4rt.Arg{p4rt.P(ParamPort, uint64(p.Num)), p4rt.P(ParamDstMAC, macUint(p.Peer.MAC)), p4rt.P(ParamSrcMAC, macUint(p.MAC))}, 0)
		if err != nil {
			return nil, err
		}
		ups = append(ups, p4rt.Insert(p4rt.Table(te)))
	}
	return ups, nil
}
