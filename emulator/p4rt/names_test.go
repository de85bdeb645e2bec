package p4rt

import (
	"bytes"
	"strings"
	"testing"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
)

func testInfo() *p4configv1.P4Info {
	mt := func(k p4configv1.MatchField_MatchType) *p4configv1.MatchField_MatchType_ {
		return &p4configv1.MatchField_MatchType_{MatchType: k}
	}
	bit := func(w int32) *p4configv1.P4DataTypeSpec {
		return &p4configv1.P4DataTypeSpec{TypeSpec: &p4configv1.P4DataTypeSpec_Bitstring{Bitstring: &p4configv1.P4BitstringLikeTypeSpec{
			TypeSpec: &p4configv1.P4BitstringLikeTypeSpec_Bit{Bit: &p4configv1.P4BitTypeSpec{Bitwidth: w}}}}}
	}
	return &p4configv1.P4Info{
		Tables: []*p4configv1.Table{
			{Preamble: &p4configv1.Preamble{Id: 0x02000001, Name: "Ingress.jobs", Alias: "jobs"},
				MatchFields: []*p4configv1.MatchField{{Id: 1, Name: "job", Bitwidth: 16, Match: mt(p4configv1.MatchField_EXACT)}, {Id: 2, Name: "round", Bitwidth: 32, Match: mt(p4configv1.MatchField_RANGE)}},
				ActionRefs:  []*p4configv1.ActionRef{{Id: 0x01000001}, {Id: 0x01000002, Scope: p4configv1.ActionRef_DEFAULT_ONLY}}},
			{Preamble: &p4configv1.Preamble{Id: 0x02000002, Name: "Ingress.routes"},
				MatchFields: []*p4configv1.MatchField{{Id: 1, Name: "dst", Bitwidth: 32, Match: mt(p4configv1.MatchField_LPM)}},
				ActionRefs:  []*p4configv1.ActionRef{{Id: 0x01000003}}},
			{Preamble: &p4configv1.Preamble{Id: 0x02000003, Name: "Egress.jobs"}},
		},
		Actions: []*p4configv1.Action{
			{Preamble: &p4configv1.Preamble{Id: 0x01000001, Name: "Ingress.bind"}, Params: []*p4configv1.Action_Param{{Id: 1, Name: "base", Bitwidth: 32}, {Id: 2, Name: "mode", Bitwidth: 8}}},
			{Preamble: &p4configv1.Preamble{Id: 0x01000002, Name: "Ingress.no_job"}},
			{Preamble: &p4configv1.Preamble{Id: 0x01000003, Name: "Ingress.forward"}, Params: []*p4configv1.Action_Param{{Id: 1, Name: "port", Bitwidth: 9}}},
		},
		Registers: []*p4configv1.Register{{Preamble: &p4configv1.Preamble{Id: 0x16000001, Name: "Ingress.count"}, TypeSpec: bit(8), Size: 16}},
		Counters:  []*p4configv1.Counter{{Preamble: &p4configv1.Preamble{Id: 0x12000001, Name: "Ingress.pkts"}, Size: 4}},
	}
}

func TestLookups(t *testing.T) {
	n, err := NewNames(testInfo())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		got  func() (uint32, error)
		want uint32
		err  string
	}{
		{"table by full name", func() (uint32, error) { return n.TableID("Ingress.jobs") }, 0x02000001, ""},
		{"table by alias", func() (uint32, error) { return n.TableID("routes") }, 0x02000002, ""},
		{"ambiguous alias", func() (uint32, error) { return n.TableID("jobs") }, 0, "ambiguous"},
		{"other full name", func() (uint32, error) { return n.TableID("Egress.jobs") }, 0x02000003, ""},
		{"missing table", func() (uint32, error) { return n.TableID("nope") }, 0, "no table"},
		{"action", func() (uint32, error) { return n.ActionID("bind") }, 0x01000001, ""},
		{"register", func() (uint32, error) { return n.RegisterID("count") }, 0x16000001, ""},
		{"counter", func() (uint32, error) { return n.CounterID("Ingress.pkts") }, 0x12000001, ""},
		{"match field", func() (uint32, error) { return n.MatchFieldID("Ingress.jobs", "round") }, 2, ""},
		{"missing field", func() (uint32, error) { return n.MatchFieldID("Ingress.jobs", "slot") }, 0, "no match field"},
		{"param", func() (uint32, error) { return n.ParamID("bind", "mode") }, 2, ""},
		{"missing param", func() (uint32, error) { return n.ParamID("bind", "size") }, 0, "no parameter"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.got()
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %#x, %v; want %#x", got, err, tt.want)
			}
		})
	}
}

func TestDuplicateNames(t *testing.T) {
	info := testInfo()
	info.Actions = append(info.Actions, info.Actions[0])
	if _, err := NewNames(info); err == nil || !strings.Contains(err.Error(), "two actions") {
		t.Fatalf("error %v, want a duplicate-name error", err)
	}
}

func TestTableEntry(t *testing.T) {
	n, _ := NewNames(testInfo())
	te, err := n.TableEntry("Ingress.jobs", []Match{Exact("job", 7), Range("round", 3, 1<<32-1)}, "bind", []Arg{P("base", 256), P("mode", 1)}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if te.TableId != 0x02000001 || te.Priority != 1 || len(te.Match) != 2 {
		t.Fatalf("entry %v", te)
	}
	if !bytes.Equal(te.Match[0].GetExact().GetValue(), []byte{7}) || !bytes.Equal(te.Match[1].GetRange().GetHigh(), []byte{0xff, 0xff, 0xff, 0xff}) {
		t.Errorf("match values %v", te.Match)
	}
	a := te.GetAction().GetAction()
	if a.ActionId != 0x01000001 || !bytes.Equal(a.Params[0].Value, []byte{1, 0}) || a.Params[1].ParamId != 2 {
		t.Errorf("action %v", a)
	}
	bad := []struct {
		name    string
		matches []Match
		action  string
		args    []Arg
		prio    int32
		err     string
	}{
		{"value too wide", []Match{Exact("job", 1<<16)}, "bind", []Arg{P("base", 0), P("mode", 0)}, 1, "does not fit in 16 bits"},
		{"no priority", []Match{Exact("job", 1)}, "bind", []Arg{P("base", 0), P("mode", 0)}, 0, "positive priority"},
		{"exact missing", nil, "bind", []Arg{P("base", 0), P("mode", 0)}, 1, `exact match field "job" missing`},
		{"wrong kind", []Match{Range("job", 1, 2)}, "bind", []Arg{P("base", 0), P("mode", 0)}, 1, "is EXACT"},
		{"param missing", []Match{Exact("job", 1)}, "bind", []Arg{P("base", 0)}, 1, `parameter "mode" missing`},
		{"param twice", []Match{Exact("job", 1)}, "bind", []Arg{P("base", 0), P("base", 0), P("mode", 0)}, 1, "given twice"},
		{"param too wide", []Match{Exact("job", 1)}, "bind", []Arg{P("base", 0), P("mode", 256)}, 1, "does not fit in 8 bits"},
		{"default-only action", []Match{Exact("job", 1)}, "no_job", nil, 1, "cannot run"},
		{"foreign action", []Match{Exact("job", 1)}, "forward", []Arg{P("port", 1)}, 1, "cannot run"},
		{"range reversed", []Match{Exact("job", 1), Range("round", 5, 4)}, "bind", []Arg{P("base", 0), P("mode", 0)}, 1, "above high"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, err := n.TableEntry("Ingress.jobs", tt.matches, tt.action, tt.args, tt.prio)
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("error %v, want one containing %q", err, tt.err)
			}
		})
	}
	if _, err := n.TableEntry("routes", []Match{LPM("dst", 0x0a000001, 32)}, "forward", []Arg{P("port", 3)}, 1); err == nil {
		t.Error("a priority on an lpm table was accepted")
	}
	if te, err := n.TableEntry("routes", []Match{LPM("dst", 0x0a000001, 32)}, "forward", []Arg{P("port", 3)}, 0); err != nil || te.Match[0].GetLpm().PrefixLen != 32 {
		t.Errorf("lpm entry: %v, %v", te, err)
	}
}

func TestRegisterAndCounterQueries(t *testing.T) {
	n, _ := NewNames(testInfo())
	re, err := n.RegisterEntry("count", 3, 200)
	if err != nil || re.GetIndex().GetIndex() != 3 || !bytes.Equal(re.GetData().GetBitstring(), []byte{200}) {
		t.Fatalf("register entry %v, %v", re, err)
	}
	if _, err := n.RegisterEntry("count", 3, 256); err == nil {
		t.Error("a 9-bit value was accepted for an 8-bit register")
	}
	if _, err := n.RegisterEntry("count", 16, 0); err == nil {
		t.Error("an index past the register was accepted")
	}
	all, err := n.RegisterEntry("count", -1, 0)
	if err != nil || all.Index != nil {
		t.Errorf("wildcard write %v, %v", all, err)
	}
	q, err := n.RegisterQuery("count", -1)
	if err != nil || q.GetRegisterEntry().GetIndex() != nil {
		t.Errorf("wildcard read %v, %v", q, err)
	}
	c, err := n.CounterQuery("pkts", 2)
	if err != nil || c.GetCounterEntry().GetIndex().GetIndex() != 2 {
		t.Errorf("counter read %v, %v", c, err)
	}
	if _, err := n.CounterQuery("pkts", 4); err == nil {
		t.Error("an index past the counter was accepted")
	}
}

func TestMulticastGroup(t *testing.T) {
	e := MulticastGroup(5, []Replica{{Port: 3, Instance: 1}, {Port: 300, Instance: 2}})
	g := e.GetPacketReplicationEngineEntry().GetMulticastGroupEntry()
	if g.MulticastGroupId != 5 || len(g.Replicas) != 2 {
		t.Fatalf("group %v", g)
	}
	for i, want := range []uint32{3, 300} {
		if p, err := ReplicaPort(g.Replicas[i]); err != nil || p != want {
			t.Errorf("replica %d port %d, %v; want %d", i, p, err, want)
		}
	}
	if p, err := ReplicaPort(&p4v1.Replica{PortKind: &p4v1.Replica_EgressPort{EgressPort: 9}}); err != nil || p != 9 {
		t.Errorf("deprecated port field: %d, %v", p, err)
	}
	if _, err := ReplicaPort(&p4v1.Replica{}); err == nil {
		t.Error("a replica without a port was accepted")
	}
}

func TestEncoding(t *testing.T) {
	for _, tt := range []struct {
		v    uint64
		want []byte
	}{{0, []byte{0}}, {1, []byte{1}}, {255, []byte{255}}, {256, []byte{1, 0}}, {1<<64 - 1, bytes.Repeat([]byte{255}, 8)}} {
		if got := EncodeUint(tt.v); !bytes.Equal(got, tt.want) {
			t.Errorf("EncodeUint(%d) = %x, want %x", tt.v, got, tt.want)
		}
		if got, err := DecodeUint(tt.want, 64); err != nil || got != tt.v {
			t.Errorf("DecodeUint(%x) = %d, %v", tt.want, got, err)
		}
	}
	if v, err := DecodeUint([]byte{0, 0, 0, 5}, 9); err != nil || v != 5 {
		t.Errorf("padded value: %d, %v", v, err)
	}
	for _, b := range [][]byte{nil, {2, 0}, bytes.Repeat([]byte{1}, 9)} {
		if _, err := DecodeUint(b, 9); err == nil {
			t.Errorf("DecodeUint(%x, 9) accepted", b)
		}
	}
}

func FuzzDecodeUint(f *testing.F) {
	f.Add([]byte{1, 0}, 9)
	f.Add([]byte{0xff}, 64)
	f.Fuzz(func(t *testing.T, b []byte, w int) {
		v, err := DecodeUint(b, w)
		if err != nil {
			return
		}
		if w > 0 && w < 64 && v>>uint(w) != 0 {
			t.Fatalf("%d does not fit %d bits", v, w)
		}
		if got, _ := DecodeUint(EncodeUint(v), w); got != v {
			t.Fatalf("round trip of %d gave %d", v, got)
		}
	})
}
