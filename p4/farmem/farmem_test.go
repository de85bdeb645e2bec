package farmem

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/p4/fwd"
)

func TestHeaderRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		h    Header
		data int
	}{
		{Header{Type: TypeRead, ID: 1, Page: 1 << 40}, 0},
		{Header{Type: TypeData, ID: 2, Page: 3, Version: 9, Sum: 0xfeedface}, 4096},
		{Header{Type: TypeData, Flags: FlagNotFound, ID: 2, Page: 3}, 0},
		{Header{Type: TypeWrite, Urgency: 7, Flags: FlagRetransmit, ID: ^uint32(0), Page: ^uint64(0), Version: 1}, MaxPageSize},
		{Header{Type: TypeAck, Urgency: 4, ID: 5}, 0},
		{Header{Type: TypeWrite, Urgency: 1}, MinPageSize},
	} {
		data := bytes.Repeat([]byte{0xa5}, tc.data)
		b := tc.h.Append(nil, data)
		if len(b) != HeaderLen+tc.data {
			t.Fatalf("%+v: %d bytes", tc.h, len(b))
		}
		h, d, err := Parse(b)
		if err != nil {
			t.Fatalf("%+v: %v", tc.h, err)
		}
		if h != tc.h || !bytes.Equal(d, data) {
			t.Errorf("round trip: got %+v, want %+v", h, tc.h)
		}
	}
}

func TestParseErrors(t *testing.T) {
	good := Header{Type: TypeRead}.Append(nil, nil)
	set := func(i int, v byte) []byte { b := bytes.Clone(good); b[i] = v; return b }
	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"short", good[:10], ErrShort},
		{"magic", set(0, 0), ErrMagic},
		{"version", set(2, 2<<4|1), ErrVersion},
		{"type 0", set(2, 1<<4), ErrType},
		{"type 9", set(2, 1<<4|9), ErrType},
		{"reserved flags", set(3, 0x08), ErrFlags},
		{"not-found read", set(3, FlagNotFound), ErrFlags},
		{"read with data", append(bytes.Clone(good), 1), ErrLength},
		{"write without page", Header{Type: TypeWrite}.Append(nil, nil), ErrLength},
		{"write odd page", Header{Type: TypeWrite}.Append(nil, make([]byte, 1000)), ErrLength},
		{"write huge page", Header{Type: TypeWrite}.Append(nil, make([]byte, 2*MaxPageSize)), ErrLength},
		{"not-found data with data", Header{Type: TypeData, Flags: FlagNotFound}.Append(nil, make([]byte, 4096)), ErrLength},
	} {
		if _, _, err := Parse(tc.b); !errors.Is(err, tc.want) {
			t.Errorf("%s: error %v, want %v", tc.name, err, tc.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(Header{Type: TypeWrite, Urgency: 3}.Append(nil, make([]byte, 512)))
	f.Add(Header{Type: TypeAck}.Append(nil, nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, data, err := Parse(b)
		if err != nil {
			return
		}
		if again := h.Append(nil, data); !bytes.Equal(again, b) {
			t.Fatalf("re-encoding a parsed message changed it")
		}
	})
}

// FuzzPipeline feeds arbitrary frames to the pipeline: it must never panic,
// whatever it emits must be one frame on a real port, and the frame is
// counted in exactly one forwarding counter cell (forwarded or a drop
// reason), as docs/farmem.md promises.
func FuzzPipeline(f *testing.F) {
	p, top := starPipeline(f)
	program(f, p, glitterRules())
	for _, tc := range vectorCases() {
		f.Add(buildFrame(top, tc), uint8(tc.in))
	}
	f.Fuzz(func(t *testing.T, b []byte, in uint8) {
		var c capture
		before := p.Base().Counters
		p.Process(0, int(in%4), b, &c)
		after := p.Base().Counters
		if n := after.Forwarded + sum(after.Drops[:]) - before.Forwarded - sum(before.Drops[:]); n != 1 {
			t.Fatalf("one frame counted %d times (forwarded %d → %d, drops %v → %v)", n, before.Forwarded, after.Forwarded, before.Drops, after.Drops)
		}
		if len(c.out) > 1 {
			t.Fatalf("%d frames out of one", len(c.out))
		}
		for _, o := range c.out {
			if o.Port < 1 || o.Port > 3 || o.Priority < 0 || o.Priority > 7 {
				t.Fatalf("emitted on port %d priority %d", o.Port, o.Priority)
			}
		}
	})
}

func TestP4Info(t *testing.T) {
	info := P4Info()
	names, err := p4rt.NewNames(info)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]uint32{TableClassify: idClassify} {
		if id, err := names.TableID(name); err != nil || id != want {
			t.Errorf("table %s: id %#x, %v; want %#x", name, id, err, want)
		}
	}
	for name, want := range map[string]uint32{ActionSetPriority: idSetPriority, ActionNoAction: idNoAction} {
		if id, err := names.ActionID(name); err != nil || id != want {
			t.Errorf("action %s: id %#x, %v; want %#x", name, id, err, want)
		}
	}
	for name, want := range map[string]uint32{CounterClass: idCounterClass, CounterStats: idCounterStats} {
		if id, err := names.CounterID(name); err != nil || id != want {
			t.Errorf("counter %s: id %#x, %v; want %#x", name, id, err, want)
		}
	}
	if c, _ := names.Counter(CounterClass); c.GetSize() != NumClasses {
		t.Errorf("%s has %d cells, want %d", CounterClass, c.GetSize(), NumClasses)
	}
	if c, _ := names.Counter(CounterStats); c.GetSize() != NumStats {
		t.Errorf("%s has %d cells, want %d", CounterStats, c.GetSize(), NumStats)
	}
	for field, width := range map[string]int32{FieldType: 4, FieldUrgency: 3} {
		if m, err := names.MatchField(TableClassify, field); err != nil || m.Bitwidth != width {
			t.Errorf("match field %s: %v, %v", field, m, err)
		}
	}
	// farmem.p4 must name the same objects.
	src, err := os.ReadFile("farmem.p4")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"table farmem_classify", "action set_priority(bit<3> prio)", `@name("type")`, `@name("urgency")`,
		"farmem_class;", "farmem_stats;", "sm.priority = prio", "table ipv4_route"} {
		if !bytes.Contains(src, []byte(s)) {
			t.Errorf("farmem.p4 lacks %q", s)
		}
	}
}

// TestP4InfoMatchesFwd checks that the forwarding objects of farmem.p4's
// P4Info are the forwarding pipeline's, which p4/fwd binds in farmem's
// Target.
func TestP4InfoMatchesFwd(t *testing.T) {
	mine, err := p4rt.NewNames(P4Info())
	if err != nil {
		t.Fatal(err)
	}
	base := fwd.P4Info()
	for _, tb := range base.Tables {
		if id, err := mine.TableID(tb.Preamble.Name); err != nil || id != tb.Preamble.Id {
			t.Errorf("table %s: farmem id %#x (%v), fwd id %#x", tb.Preamble.Name, id, err, tb.Preamble.Id)
		}
	}
	for _, a := range base.Actions {
		if id, err := mine.ActionID(a.Preamble.Name); err != nil || id != a.Preamble.Id {
			t.Errorf("action %s: farmem id %#x (%v), fwd id %#x", a.Preamble.Name, id, err, a.Preamble.Id)
		}
	}
	for _, c := range base.Counters {
		if id, err := mine.CounterID(c.Preamble.Name); err != nil || id != c.Preamble.Id {
			t.Errorf("counter %s: farmem id %#x (%v), fwd id %#x", c.Preamble.Name, id, err, c.Preamble.Id)
		}
	}
}

func TestDeviceTableAndCounters(t *testing.T) {
	ctx := context.Background()
	p, top := starPipeline(t)
	c := p4rt.Local(p)
	names, _ := p4rt.NewNames(c.P4Info())
	entry := func(typ, urg, prio uint64) *p4v1.Entity {
		te, err := names.TableEntry(TableClassify, []p4rt.Match{p4rt.Exact(FieldType, typ), p4rt.Exact(FieldUrgency, urg)},
			ActionSetPriority, []p4rt.Arg{p4rt.P(ParamPrio, prio)}, 0)
		if err != nil {
			t.Fatal(err)
		}
		return p4rt.Table(te)
	}
	code := func(err error) codes.Code { return status.Code(err) }
	if err := c.Write(ctx, p4rt.Insert(entry(3, 2, 5))); err != nil {
		t.Fatal(err)
	}
	if err := c.Write(ctx, p4rt.Insert(entry(3, 2, 6))); code(err) != codes.AlreadyExists {
		t.Errorf("second INSERT: %v, want AlreadyExists", err)
	}
	if err := c.Write(ctx, p4rt.Modify(entry(3, 3, 6))); code(err) != codes.NotFound {
		t.Errorf("MODIFY of a missing entry: %v, want NotFound", err)
	}
	if err := c.Write(ctx, p4rt.Modify(entry(3, 2, 6))); err != nil {
		t.Fatal(err)
	}
	if prio, ok := p.Priority(TypeWrite, 2); !ok || prio != 6 {
		t.Errorf("Priority(write, 2) = %d, %v; want 6", prio, ok)
	}
	for _, bad := range []struct {
		e    *p4v1.Entity
		want codes.Code
	}{
		{entry(9, 0, 1), codes.InvalidArgument}, // no such message type
		{p4rt.Table(&p4v1.TableEntry{TableId: idClassify, Match: entry(1, 0, 1).GetTableEntry().Match[:1],
			Action: entry(1, 0, 1).GetTableEntry().Action}), codes.InvalidArgument}, // one key field
		{p4rt.Table(&p4v1.TableEntry{TableId: idClassify, Match: entry(1, 0, 1).GetTableEntry().Match,
			Action: &p4v1.TableAction{Type: &p4v1.TableAction_Action{Action: &p4v1.Action{ActionId: idSetPriority,
				Params: []*p4v1.Action_Param{{ParamId: 1, Value: []byte{9}}}}}}}), codes.OutOfRange}, // prio does not fit 3 bits (P4Runtime §8.3)
	} {
		if err := c.Write(ctx, p4rt.Insert(bad.e)); code(err) != bad.want {
			t.Errorf("bad entry %v: %v, want %v", bad.e, err, bad.want)
		}
	}
	q, _ := names.TableQuery(TableClassify)
	got, err := c.Read(ctx, q)
	if err != nil || len(got) != 1 {
		t.Fatalf("read back %d entries, %v; want 1", len(got), err)
	}
	// The default action can be modified, and reads back.
	def := &p4v1.TableEntry{TableId: idClassify, IsDefaultAction: true, Action: entry(1, 0, 2).GetTableEntry().Action}
	if err := c.Write(ctx, p4rt.Modify(p4rt.Table(def))); err != nil {
		t.Fatal(err)
	}
	got, err = c.Read(ctx, p4rt.Table(&p4v1.TableEntry{TableId: idClassify, IsDefaultAction: true}))
	if err != nil || len(got) != 1 || got[0].GetTableEntry().GetAction().GetAction().GetActionId() != idSetPriority {
		t.Fatalf("default entry read back %v, %v", got, err)
	}
	if err := c.Write(ctx, p4rt.Insert(p4rt.Table(def))); code(err) != codes.InvalidArgument {
		t.Errorf("INSERT of a default entry: %v, want InvalidArgument", err)
	}
	// Traffic: a write at urgency 2 (priority 6) and a read (default: 2).
	hosts := top.Hosts()
	for _, tc := range []vectorCase{
		{in: 1, from: 0, to: 2, srcPort: HostPort, dstPort: Port, payload: msg(Header{Type: TypeWrite, Urgency: 2}, 4096), wantPrio: 6},
		{in: 1, from: 0, to: 2, srcPort: HostPort, dstPort: Port, payload: msg(Header{Type: TypeRead}, 0), wantPrio: 2},
	} {
		var cap capture
		p.Process(0, tc.in, buildFrame(top, tc), &cap)
		if len(cap.out) != 1 || cap.out[0].Priority != tc.wantPrio {
			t.Errorf("%v out, want priority %d", cap.out, tc.wantPrio)
		}
	}
	_ = hosts
	counts, err := ReadCounts(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if counts.Packets[Class(TypeWrite, 2)] != 1 || counts.Packets[Class(TypeRead, 0)] != 1 || counts.Stats[StatClassified] != 1 || counts.Stats[StatDefault] != 1 {
		t.Errorf("counters %+v", counts)
	}
	if counts.Bytes[Class(TypeWrite, 2)] != uint64(42+HeaderLen+4096) {
		t.Errorf("write bytes %d", counts.Bytes[Class(TypeWrite, 2)])
	}
	// Counters reset with a MODIFY of zero.
	reset := &p4v1.Entity{Entity: &p4v1.Entity_CounterEntry{CounterEntry: &p4v1.CounterEntry{CounterId: idCounterClass, Data: &p4v1.CounterData{}}}}
	if err := c.Write(ctx, p4rt.Modify(reset)); err != nil {
		t.Fatal(err)
	}
	if counts, _ = ReadCounts(ctx, c); counts.Packets != [NumClasses]uint64{} {
		t.Errorf("class counters not reset: %v", counts.Packets)
	}
	// Program replaces the whole table.
	if err := Program(ctx, c, []Rule{{TypeRead, 0, 7}}); err != nil {
		t.Fatal(err)
	}
	if got, _ = c.Read(ctx, q); len(got) != 1 {
		t.Errorf("after Program: %d entries, want 1", len(got))
	}
	if err := Program(ctx, c, []Rule{{TypeRead, 0, 7}, {TypeRead, 0, 6}}); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("duplicate rule: %v", err)
	}
}

func TestDeviceUnknownEntities(t *testing.T) {
	p, _ := starPipeline(t)
	err := p.Write([]*p4v1.Update{p4rt.Insert(p4rt.Register(&p4v1.RegisterEntry{RegisterId: 0x16000099}))})
	if c := status.Code(err); c != codes.Unimplemented && c != codes.NotFound && c != codes.InvalidArgument {
		t.Errorf("write of an unknown register: %v", err)
	}
	if err := p.Write([]*p4v1.Update{{Type: p4v1.Update_INSERT}}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("update without entity: %v", err)
	}
}

// TestProgramName checks that the name testbeds and switches load the
// program by is its P4Info's package name.
func TestProgramName(t *testing.T) {
	if got := P4Info().GetPkgInfo().GetName(); got != ProgramName {
		t.Errorf("P4Info pkg_info.name %q, ProgramName %q", got, ProgramName)
	}
}
