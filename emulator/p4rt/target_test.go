package p4rt

import (
	"errors"
	"slices"
	"strings"
	"testing"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
)

// toyInfo is a P4Info with every kind of object the Target handles, the
// match kinds tracebed's programs do not use among them.
const toyInfo = `
pkg_info { name: "toolkit_test" }
tables {
  preamble { id: 0x02000001 name: "c.acl" alias: "acl" }
  match_fields { id: 1 name: "dst" bitwidth: 32 match_type: LPM }
  match_fields { id: 2 name: "proto" bitwidth: 8 match_type: TERNARY }
  match_fields { id: 3 name: "port" bitwidth: 16 match_type: RANGE }
  match_fields { id: 4 name: "vlan" bitwidth: 12 match_type: OPTIONAL }
  match_fields { id: 5 name: "zone" bitwidth: 4 match_type: EXACT }
  action_refs { id: 0x01000001 }
  action_refs { id: 0x01000002 scope: DEFAULT_ONLY }
  action_refs { id: 0x01000003 scope: TABLE_ONLY }
  initial_default_action { action_id: 0x01000002 }
  size: 4
}
tables {
  preamble { id: 0x02000002 name: "c.fixed" alias: "fixed" }
  match_fields { id: 1 name: "k" bitwidth: 8 match_type: EXACT }
  action_refs { id: 0x01000001 }
  const_default_action_id: 0x01000001
  initial_default_action { action_id: 0x01000001 arguments { param_id: 1 value: "\x05" } }
  is_const_table: true
}
tables {
  preamble { id: 0x02000003 name: "c.ecmp_t" alias: "ecmp_t" }
  match_fields { id: 1 name: "k" bitwidth: 8 match_type: EXACT }
  action_refs { id: 0x01000001 }
  implementation_id: 0x11000001
  size: 16
}
tables {
  preamble { id: 0x02000004 name: "c.aged" alias: "aged" }
  match_fields { id: 1 name: "k" bitwidth: 8 match_type: EXACT }
  action_refs { id: 0x01000001 }
  idle_timeout_behavior: NOTIFY_CONTROL
}
actions { preamble { id: 0x01000001 name: "c.set" alias: "set" } params { id: 1 name: "v" bitwidth: 8 } }
actions { preamble { id: 0x01000002 name: "c.miss" alias: "miss" } }
actions { preamble { id: 0x01000003 name: "c.only" alias: "only" } }
action_profiles {
  preamble { id: 0x11000001 name: "c.sel" alias: "sel" }
  table_ids: 0x02000003
  with_selector: true
  size: 3
  max_group_size: 4
}
counters { preamble { id: 0x12000001 name: "c.hits" alias: "hits" } spec { unit: BOTH } size: 4 }
registers {
  preamble { id: 0x16000001 name: "c.r8" alias: "r8" }
  type_spec { bitstring { bit { bitwidth: 8 } } }
  size: 4
}
registers {
  preamble { id: 0x16000002 name: "c.s8" alias: "s8" }
  type_spec { bitstring { int { bitwidth: 8 } } }
  size: 2
}
digests {
  preamble { id: 0x17000001 name: "c.learn" alias: "learn" }
  type_spec { bitstring { bit { bitwidth: 48 } } }
}
controller_packet_metadata {
  preamble { id: 0x04000001 name: "packet_in" }
  metadata { id: 1 name: "port" bitwidth: 9 }
  metadata { id: 2 name: "pad" bitwidth: 7 }
}
controller_packet_metadata {
  preamble { id: 0x04000002 name: "packet_out" }
  metadata { id: 1 name: "port" bitwidth: 9 }
  metadata { id: 2 name: "flag" bitwidth: 1 }
  metadata { id: 3 name: "pad" bitwidth: 6 }
}
`

// toy is a data plane bound to toyInfo that records what its bindings
// were told, so tests can compare it with what the Target reads back.
type toy struct {
	t        *Target
	entries  map[string]string // table/key → action summary
	defaults map[string]string
	hits     [4][2]uint64
	r8       [4]uint64
	s8       [2]uint64
	groups   map[uint32][]Replica
	fail     bool // the bindings refuse every change
	digests  int
}

func newToy(t testing.TB) *toy {
	t.Helper()
	info := &p4configv1.P4Info{}
	if err := prototext.Unmarshal([]byte(toyInfo), info); err != nil {
		t.Fatal(err)
	}
	tg, err := NewTarget(info)
	if err != nil {
		t.Fatal(err)
	}
	y := &toy{t: tg, entries: map[string]string{}, defaults: map[string]string{}, groups: map[uint32][]Replica{}}
	apply := func(c *Change) error {
		if y.fail {
			return status.Error(codes.ResourceExhausted, "toy: refused")
		}
		if c.Type == p4v1.Update_DELETE {
			delete(y.entries, c.Old.Table()+"/"+c.Old.key)
			return nil
		}
		var acts []string
		for _, a := range c.Entry.Actions {
			acts = append(acts, a.Name()+":"+string(a.Bytes("v"))+"x"+string(rune('0'+a.Weight)))
		}
		if c.Entry.IsDefault {
			y.defaults[c.Entry.Table()] = strings.Join(acts, ",")
			return nil
		}
		y.entries[c.Entry.Table()+"/"+c.Entry.key] = strings.Join(acts, ",")
		return nil
	}
	for _, name := range []string{"c.acl", "c.fixed", "c.ecmp_t", "c.aged"} {
		if err := tg.Table(name, apply); err != nil {
			t.Fatal(err)
		}
	}
	must0(t, tg.Action("c.set", func(c *Call) error {
		if c.Uint("v") == 99 {
			return errors.New("99 is not allowed")
		}
		return nil
	}))
	must0(t, tg.Counter("c.hits", CounterCells{
		Get: func(i int) (uint64, uint64) { return y.hits[i][0], y.hits[i][1] },
		Set: func(i int, pk, by uint64) { y.hits[i] = [2]uint64{pk, by} },
	}))
	must0(t, tg.Register("c.r8", RegisterCells{Get: func(i int) uint64 { return y.r8[i] }, Set: func(i int, v uint64) { y.r8[i] = v }}))
	must0(t, tg.Register("c.s8", RegisterCells{Get: func(i int) uint64 { return y.s8[i] }, Set: func(i int, v uint64) { y.s8[i] = v }}))
	tg.MulticastGroups(func(c *GroupChange) error {
		if y.fail {
			return status.Error(codes.ResourceExhausted, "toy: refused")
		}
		if c.Type == p4v1.Update_DELETE {
			delete(y.groups, c.ID)
		} else {
			y.groups[c.ID] = c.Replicas
		}
		return nil
	})
	tg.SetDigestSink(func(uint32, *p4v1.DigestEntry_Config, *p4v1.P4Data) { y.digests++ })
	if u := tg.Unbound(); len(u) > 0 {
		t.Fatalf("unbound: %v", u)
	}
	y.t = tg
	return y
}

func must0(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func exact(id uint32, v ...byte) *p4v1.FieldMatch {
	return &p4v1.FieldMatch{FieldId: id, FieldMatchType: &p4v1.FieldMatch_Exact_{Exact: &p4v1.FieldMatch_Exact{Value: v}}}
}

func set(v ...byte) *p4v1.TableAction {
	return &p4v1.TableAction{Type: &p4v1.TableAction_Action{Action: &p4v1.Action{ActionId: 0x01000001,
		Params: []*p4v1.Action_Param{{ParamId: 1, Value: v}}}}}
}

func acl(prio int32, ms ...*p4v1.FieldMatch) *p4v1.TableEntry {
	return &p4v1.TableEntry{TableId: 0x02000001, Priority: prio, Match: append([]*p4v1.FieldMatch{exact(5, 1)}, ms...), Action: set(7)}
}

func lpm(v []byte, plen int32) *p4v1.FieldMatch {
	return &p4v1.FieldMatch{FieldId: 1, FieldMatchType: &p4v1.FieldMatch_Lpm{Lpm: &p4v1.FieldMatch_LPM{Value: v, PrefixLen: plen}}}
}

func ternary(v, m []byte) *p4v1.FieldMatch {
	return &p4v1.FieldMatch{FieldId: 2, FieldMatchType: &p4v1.FieldMatch_Ternary_{Ternary: &p4v1.FieldMatch_Ternary{Value: v, Mask: m}}}
}

func rng(lo, hi []byte) *p4v1.FieldMatch {
	return &p4v1.FieldMatch{FieldId: 3, FieldMatchType: &p4v1.FieldMatch_Range_{Range: &p4v1.FieldMatch_Range{Low: lo, High: hi}}}
}

// TestMatchRules checks the match format of §9.1.1 on every match kind.
func TestMatchRules(t *testing.T) {
	tests := []struct {
		name string
		te   *p4v1.TableEntry
		code codes.Code
	}{
		{"lpm", acl(1, lpm([]byte{10, 0, 0, 0}, 8)), codes.OK},
		{"lpm bits past the prefix", acl(1, lpm([]byte{10, 0, 0, 1}, 8)), codes.InvalidArgument},
		{"lpm prefix 0", acl(1, lpm([]byte{0}, 0)), codes.InvalidArgument},
		{"lpm prefix too long", acl(1, lpm([]byte{10}, 33)), codes.InvalidArgument},
		{"ternary", acl(1, ternary([]byte{6}, []byte{0xff})), codes.OK},
		{"ternary value outside mask", acl(1, ternary([]byte{7}, []byte{0xfe})), codes.InvalidArgument},
		{"ternary mask 0", acl(1, ternary([]byte{0}, []byte{0})), codes.InvalidArgument},
		{"ternary too wide", acl(1, ternary([]byte{1}, []byte{1, 0xff})), codes.OutOfRange},
		{"range", acl(1, rng([]byte{1}, []byte{0x10})), codes.OK},
		{"range low above high", acl(1, rng([]byte{9}, []byte{8})), codes.InvalidArgument},
		{"range of every value", acl(1, rng([]byte{0}, []byte{0xff, 0xff})), codes.InvalidArgument},
		{"optional", acl(1, &p4v1.FieldMatch{FieldId: 4, FieldMatchType: &p4v1.FieldMatch_Optional_{Optional: &p4v1.FieldMatch_Optional{Value: []byte{0x0f, 0xff}}}}), codes.OK},
		{"optional too wide", acl(1, &p4v1.FieldMatch{FieldId: 4, FieldMatchType: &p4v1.FieldMatch_Optional_{Optional: &p4v1.FieldMatch_Optional{Value: []byte{0x10, 0}}}}), codes.OutOfRange},
		{"exact omitted", &p4v1.TableEntry{TableId: 0x02000001, Priority: 1, Action: set(1)}, codes.InvalidArgument},
		{"field twice", acl(1, exact(5, 1)), codes.InvalidArgument},
		{"unknown field", acl(1, exact(9, 1)), codes.InvalidArgument},
		{"wrong kind", acl(1, &p4v1.FieldMatch{FieldId: 1, FieldMatchType: &p4v1.FieldMatch_Exact_{Exact: &p4v1.FieldMatch_Exact{Value: []byte{1}}}}), codes.InvalidArgument},
		{"no kind", acl(1, &p4v1.FieldMatch{FieldId: 1}), codes.InvalidArgument},
		{"priority 0", acl(0), codes.InvalidArgument},
		{"empty value", acl(1, lpm(nil, 8)), codes.OutOfRange},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			y := newToy(t)
			err := y.t.Write([]*p4v1.Update{Insert(Table(tt.te))})
			if status.Code(err) != tt.code {
				t.Fatalf("%v, want %v", err, tt.code)
			}
			if (err == nil) != (len(y.entries) == 1) {
				t.Fatalf("store changed on error or not on success: %v", y.entries)
			}
		})
	}
}

// TestCanonicalKey: differently encoded writes of one key are one entry,
// read back canonical.
func TestCanonicalKey(t *testing.T) {
	y := newToy(t)
	a := acl(3, lpm([]byte{0, 10, 0, 0, 0}, 8), ternary([]byte{0, 6}, []byte{0, 0, 0xff}))
	must0(t, y.t.Write([]*p4v1.Update{Insert(Table(a))}))
	b := acl(3, ternary([]byte{6}, []byte{0xff}), lpm([]byte{10, 0, 0, 0}, 8))
	if err := y.t.Write([]*p4v1.Update{Insert(Table(b))}); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("same key, other encoding: %v", err)
	}
	var got []*p4v1.Entity
	must0(t, y.t.Read(Table(&p4v1.TableEntry{TableId: 0x02000001}), func(e *p4v1.Entity) error { got = append(got, e); return nil }))
	want := &p4v1.TableEntry{TableId: 0x02000001, Priority: 3, Match: []*p4v1.FieldMatch{lpm([]byte{10, 0, 0, 0}, 8), ternary([]byte{6}, []byte{0xff}), exact(5, 1)}, Action: set(7)}
	if len(got) != 1 || !proto.Equal(got[0].GetTableEntry(), want) {
		t.Fatalf("read %v, want %v", got, want)
	}
	// Another priority is another entry.
	must0(t, y.t.Write([]*p4v1.Update{Insert(Table(acl(4, lpm([]byte{10, 0, 0, 0}, 8), ternary([]byte{6}, []byte{0xff}))))}))
	if len(y.entries) != 2 {
		t.Fatalf("entries %v", y.entries)
	}
}

func TestScopesAndDefaults(t *testing.T) {
	y := newToy(t)
	only := &p4v1.TableAction{Type: &p4v1.TableAction_Action{Action: &p4v1.Action{ActionId: 0x01000003}}}
	miss := &p4v1.TableAction{Type: &p4v1.TableAction_Action{Action: &p4v1.Action{ActionId: 0x01000002}}}
	def := func(a *p4v1.TableAction) *p4v1.Entity {
		return Table(&p4v1.TableEntry{TableId: 0x02000001, IsDefaultAction: true, Action: a})
	}
	tests := []struct {
		name string
		u    *p4v1.Update
		code codes.Code
	}{
		{"@defaultonly in an entry", Insert(Table(&p4v1.TableEntry{TableId: 0x02000001, Priority: 1, Match: []*p4v1.FieldMatch{exact(5, 1)}, Action: miss})), codes.PermissionDenied},
		{"@tableonly as default", Modify(def(only)), codes.PermissionDenied},
		{"default to an action of the table", Modify(def(set(3))), codes.OK},
		{"default with priority", Modify(Table(&p4v1.TableEntry{TableId: 0x02000001, IsDefaultAction: true, Priority: 1})), codes.InvalidArgument},
		{"default reset", Modify(def(nil)), codes.OK},
		{"const default", Modify(Table(&p4v1.TableEntry{TableId: 0x02000002, IsDefaultAction: true, Action: set(1)})), codes.PermissionDenied},
		{"const table", Insert(Table(&p4v1.TableEntry{TableId: 0x02000002, Match: []*p4v1.FieldMatch{exact(1, 1)}, Action: set(1)})), codes.PermissionDenied},
		{"idle timeout on an idle-timeout table", Insert(Table(&p4v1.TableEntry{TableId: 0x02000004, Match: []*p4v1.FieldMatch{exact(1, 1)}, Action: set(1), IdleTimeoutNs: 5})), codes.Unimplemented},
		{"time_since_last_hit", Insert(Table(&p4v1.TableEntry{TableId: 0x02000004, Match: []*p4v1.FieldMatch{exact(1, 1)}, Action: set(1), TimeSinceLastHit: &p4v1.TableEntry_IdleTimeout{}})), codes.InvalidArgument},
		{"direct counter data without a direct counter", Insert(Table(&p4v1.TableEntry{TableId: 0x02000004, Match: []*p4v1.FieldMatch{exact(1, 1)}, Action: set(1), CounterData: &p4v1.CounterData{}})), codes.InvalidArgument},
		{"program check", Insert(Table(&p4v1.TableEntry{TableId: 0x02000004, Match: []*p4v1.FieldMatch{exact(1, 1)}, Action: set(99)})), codes.InvalidArgument},
		{"missing parameter", Insert(Table(&p4v1.TableEntry{TableId: 0x02000004, Match: []*p4v1.FieldMatch{exact(1, 1)}, Action: &p4v1.TableAction{Type: &p4v1.TableAction_Action{Action: &p4v1.Action{ActionId: 0x01000001}}}})), codes.InvalidArgument},
		{"direct action on an indirect table", Insert(Table(&p4v1.TableEntry{TableId: 0x02000003, Match: []*p4v1.FieldMatch{exact(1, 1)}, Action: set(1)})), codes.InvalidArgument},
		{"member on a direct table", Insert(Table(&p4v1.TableEntry{TableId: 0x02000004, Match: []*p4v1.FieldMatch{exact(1, 1)}, Action: &p4v1.TableAction{Type: &p4v1.TableAction_ActionProfileMemberId{ActionProfileMemberId: 1}}})), codes.InvalidArgument},
	}
	for _, tt := range tests {
		if err := y.t.Write([]*p4v1.Update{tt.u}); status.Code(err) != tt.code {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.code)
		}
	}
	if y.defaults["c.acl"] != "c.miss:x1" {
		t.Errorf("default after the reset: %q", y.defaults["c.acl"])
	}
	// The table holds 4 entries.
	var ups []*p4v1.Update
	for i := range 5 {
		ups = append(ups, Insert(Table(acl(int32(i+1)))))
	}
	be := &BatchError{}
	if err := y.t.Write(ups); !errors.As(err, &be) || status.Code(be.Errs[4]) != codes.ResourceExhausted || be.Failed() != 1 {
		t.Errorf("fifth entry of a 4-entry table: %v", err)
	}
}

func TestReadFilters(t *testing.T) {
	y := newToy(t)
	a, b := acl(1), acl(2)
	b.Metadata, b.ControllerMetadata = []byte("m"), 9
	must0(t, y.t.Write([]*p4v1.Update{Insert(Table(a)), Insert(Table(b))}))
	count := func(q *p4v1.TableEntry) int {
		n := 0
		must0(t, y.t.Read(Table(q), func(*p4v1.Entity) error { n++; return nil }))
		return n
	}
	for _, tt := range []struct {
		name string
		q    *p4v1.TableEntry
		want int
	}{
		{"all tables", &p4v1.TableEntry{}, 2},
		{"one table", &p4v1.TableEntry{TableId: 0x02000001}, 2},
		{"priority", &p4v1.TableEntry{TableId: 0x02000001, Priority: 2}, 1},
		{"metadata", &p4v1.TableEntry{TableId: 0x02000001, Metadata: []byte("m")}, 1},
		{"controller_metadata", &p4v1.TableEntry{TableId: 0x02000001, ControllerMetadata: 9}, 1},
		{"action", &p4v1.TableEntry{TableId: 0x02000001, Action: &p4v1.TableAction{Type: &p4v1.TableAction_Action{Action: &p4v1.Action{ActionId: 0x01000002}}}}, 0},
		{"key", &p4v1.TableEntry{TableId: 0x02000001, Priority: 1, Match: a.Match}, 1},
		{"missing key", &p4v1.TableEntry{TableId: 0x02000001, Priority: 7, Match: a.Match}, 0},
		{"default only", &p4v1.TableEntry{TableId: 0x02000001, IsDefaultAction: true}, 1},
		{"every default", &p4v1.TableEntry{IsDefaultAction: true}, 4},
	} {
		if got := count(tt.q); got != tt.want {
			t.Errorf("%s: %d entries, want %d", tt.name, got, tt.want)
		}
	}
	if err := y.t.Read(Table(&p4v1.TableEntry{Match: a.Match}), func(*p4v1.Entity) error { return nil }); status.Code(err) != codes.InvalidArgument {
		t.Errorf("match without a table: %v", err)
	}
}

// TestSelector: members, groups and one-shot sets, and entries re-bound
// when a member or group changes.
func TestSelector(t *testing.T) {
	y := newToy(t)
	member := func(id uint32, v byte) *p4v1.Entity {
		return &p4v1.Entity{Entity: &p4v1.Entity_ActionProfileMember{ActionProfileMember: &p4v1.ActionProfileMember{
			ActionProfileId: 0x11000001, MemberId: id, Action: set(v).GetAction()}}}
	}
	group := func(id uint32, maxSize int32, ms ...uint32) *p4v1.Entity {
		g := &p4v1.ActionProfileGroup{ActionProfileId: 0x11000001, GroupId: id, MaxSize: maxSize}
		for _, m := range ms {
			g.Members = append(g.Members, &p4v1.ActionProfileGroup_Member{MemberId: m, Weight: 2})
		}
		return &p4v1.Entity{Entity: &p4v1.Entity_ActionProfileGroup{ActionProfileGroup: g}}
	}
	entry := func(k byte, a *p4v1.TableAction) *p4v1.Entity {
		return Table(&p4v1.TableEntry{TableId: 0x02000003, Match: []*p4v1.FieldMatch{exact(1, k)}, Action: a})
	}
	toGroup := &p4v1.TableAction{Type: &p4v1.TableAction_ActionProfileGroupId{ActionProfileGroupId: 1}}
	steps := []struct {
		name string
		u    *p4v1.Update
		code codes.Code
	}{
		{"member", Insert(member(1, 1)), codes.OK},
		{"member 2", Insert(member(2, 2)), codes.OK},
		{"member 3", Insert(member(3, 3)), codes.OK},
		{"member 4: profile full", Insert(member(4, 4)), codes.ResourceExhausted},
		{"member id 0", Insert(member(0, 4)), codes.InvalidArgument},
		{"member refused by the program", Modify(member(3, 99)), codes.InvalidArgument},
		{"group", Insert(group(1, 4, 1, 2)), codes.OK},
		{"group over its max_size", Insert(group(2, 4, 1, 2, 3)), codes.ResourceExhausted},
		{"group above max_group_size", Insert(group(2, 5, 1)), codes.InvalidArgument},
		{"group of a missing member", Insert(group(2, 4, 7)), codes.NotFound},
		{"entry to the group", Insert(entry(1, toGroup)), codes.OK},
		{"group in use", Delete(group(1, 4)), codes.FailedPrecondition},
		{"member in use", Delete(member(2, 0)), codes.FailedPrecondition},
		{"member to the group's member", Modify(member(1, 9)), codes.OK},
	}
	for _, s := range steps {
		if err := y.t.Write([]*p4v1.Update{s.u}); status.Code(err) != s.code {
			t.Fatalf("%s: %v, want %v", s.name, err, s.code)
		}
	}
	if got := onlyValue(y.entries); got != "c.set:\x09x2,c.set:\x02x2" {
		t.Fatalf("entry after the member changed: %q", got)
	}
	// A binding that refuses the re-bound entry undoes the member change.
	y.fail = true
	if err := y.t.Write([]*p4v1.Update{Modify(member(2, 8))}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("refused re-bind: %v", err)
	}
	y.fail = false
	var got []*p4v1.Entity
	must0(t, y.t.Read(member(2, 0), func(e *p4v1.Entity) error { got = append(got, e); return nil }))
	if len(got) != 1 || got[0].GetActionProfileMember().GetAction().GetParams()[0].GetValue()[0] != 2 {
		t.Fatalf("member after a refused MODIFY: %v", got)
	}
	// One-shot sets are checked and read back as written.
	oneShot := func(ws ...int32) *p4v1.TableAction {
		s := &p4v1.ActionProfileActionSet{}
		for _, w := range ws {
			s.ActionProfileActions = append(s.ActionProfileActions, &p4v1.ActionProfileAction{Action: set(1).GetAction(), Weight: w})
		}
		return &p4v1.TableAction{Type: &p4v1.TableAction_ActionProfileActionSet{ActionProfileActionSet: s}}
	}
	for _, tt := range []struct {
		a    *p4v1.TableAction
		code codes.Code
	}{{oneShot(1, 3), codes.OK}, {oneShot(0), codes.InvalidArgument}, {oneShot(3, 2), codes.InvalidArgument}, {oneShot(), codes.InvalidArgument}} {
		if err := y.t.Write([]*p4v1.Update{Insert(entry(byte(2+len(y.entries)), tt.a))}); status.Code(err) != tt.code {
			t.Errorf("one-shot %v: %v, want %v", tt.a, err, tt.code)
		}
	}
	got = nil
	must0(t, y.t.Read(entry(3, nil), func(e *p4v1.Entity) error { got = append(got, e); return nil }))
	if len(got) != 1 || !proto.Equal(got[0].GetTableEntry().GetAction(), oneShot(1, 3)) {
		t.Errorf("one-shot read back %v", got)
	}
}

func onlyValue(m map[string]string) string {
	for _, v := range m {
		return v
	}
	return ""
}

func TestCellsAndGroups(t *testing.T) {
	y := newToy(t)
	reg := func(id uint32, index int64, v []byte) *p4v1.Update {
		re := &p4v1.RegisterEntry{RegisterId: id, Data: &p4v1.P4Data{Data: &p4v1.P4Data_Bitstring{Bitstring: v}}}
		if index >= 0 {
			re.Index = &p4v1.Index{Index: index}
		}
		return Modify(Register(re))
	}
	for _, tt := range []struct {
		name string
		u    *p4v1.Update
		code codes.Code
	}{
		{"register", reg(0x16000001, 1, []byte{0, 0, 0xfe}), codes.OK},
		{"register too wide", reg(0x16000001, 1, []byte{1, 0}), codes.OutOfRange},
		{"signed register -1", reg(0x16000002, -1, []byte{0xff, 0xff}), codes.OK},
		{"signed register -129", reg(0x16000002, 0, []byte{0xff, 0x7f}), codes.OutOfRange},
		{"register past the end", reg(0x16000001, 4, []byte{1}), codes.OutOfRange},
		{"register of another type", Modify(Register(&p4v1.RegisterEntry{RegisterId: 0x16000001, Data: &p4v1.P4Data{Data: &p4v1.P4Data_Bool{Bool: true}}})), codes.InvalidArgument},
		{"unknown register", reg(0x16000009, 0, []byte{1}), codes.NotFound},
		{"counter data unset", Modify(&p4v1.Entity{Entity: &p4v1.Entity_CounterEntry{CounterEntry: &p4v1.CounterEntry{CounterId: 0x12000001}}}), codes.OK},
		{"group", Insert(MulticastGroup(5, []Replica{{1, 0}, {1, 1}})), codes.OK},
		{"group replica twice", Insert(MulticastGroup(6, []Replica{{1, 0}, {1, 0}})), codes.InvalidArgument},
		{"group 0", Insert(MulticastGroup(0, nil)), codes.InvalidArgument},
		{"replica without a port", Insert(&p4v1.Entity{Entity: &p4v1.Entity_PacketReplicationEngineEntry{PacketReplicationEngineEntry: &p4v1.PacketReplicationEngineEntry{
			Type: &p4v1.PacketReplicationEngineEntry_MulticastGroupEntry{MulticastGroupEntry: &p4v1.MulticastGroupEntry{
				MulticastGroupId: 7, Replicas: []*p4v1.Replica{{Instance: 1}}}}}}}), codes.InvalidArgument},
		{"clone session", Insert(&p4v1.Entity{Entity: &p4v1.Entity_PacketReplicationEngineEntry{PacketReplicationEngineEntry: &p4v1.PacketReplicationEngineEntry{
			Type: &p4v1.PacketReplicationEngineEntry_CloneSessionEntry{CloneSessionEntry: &p4v1.CloneSessionEntry{SessionId: 1}}}}}), codes.Unimplemented},
		{"meter", Modify(&p4v1.Entity{Entity: &p4v1.Entity_MeterEntry{MeterEntry: &p4v1.MeterEntry{}}}), codes.Unimplemented},
	} {
		if err := y.t.Write([]*p4v1.Update{tt.u}); status.Code(err) != tt.code {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.code)
		}
	}
	if y.r8[1] != 0xfe || y.s8 != [2]uint64{0xff, 0xff} {
		t.Errorf("registers %v %v", y.r8, y.s8)
	}
	var got []*p4v1.Entity
	must0(t, y.t.Read(Register(&p4v1.RegisterEntry{RegisterId: 0x16000002}), func(e *p4v1.Entity) error { got = append(got, e); return nil }))
	if len(got) != 2 || string(got[0].GetRegisterEntry().GetData().GetBitstring()) != "\xff" {
		t.Errorf("signed register read back %v (want -1 as \\xff)", got)
	}
	if !slices.Equal(y.groups[5], []Replica{{1, 0}, {1, 1}}) {
		t.Errorf("groups %v", y.groups)
	}
}

func TestDigestEntries(t *testing.T) {
	y := newToy(t)
	d, err := y.t.Digest("learn")
	must0(t, err)
	data := &p4v1.P4Data{Data: &p4v1.P4Data_Bitstring{Bitstring: []byte{1}}}
	if d.Send(data) {
		t.Fatal("a digest no controller enabled was sent")
	}
	de := func(cfg *p4v1.DigestEntry_Config) *p4v1.Entity {
		return &p4v1.Entity{Entity: &p4v1.Entity_DigestEntry{DigestEntry: &p4v1.DigestEntry{DigestId: 0x17000001, Config: cfg}}}
	}
	cfg := &p4v1.DigestEntry_Config{MaxTimeoutNs: 1000, MaxListSize: 4, AckTimeoutNs: 5000}
	for _, tt := range []struct {
		u    *p4v1.Update
		code codes.Code
	}{
		{Modify(de(cfg)), codes.NotFound},
		{Insert(de(nil)), codes.InvalidArgument},
		{Insert(de(cfg)), codes.OK},
		{Insert(de(cfg)), codes.AlreadyExists},
		{Insert(&p4v1.Entity{Entity: &p4v1.Entity_DigestEntry{DigestEntry: &p4v1.DigestEntry{DigestId: 9}}}), codes.NotFound},
	} {
		if err := y.t.Write([]*p4v1.Update{tt.u}); status.Code(err) != tt.code {
			t.Errorf("%v: %v, want %v", tt.u, err, tt.code)
		}
	}
	if !d.Send(data) || y.digests != 1 {
		t.Fatal("an enabled digest was not sent")
	}
	var got []*p4v1.Entity
	must0(t, y.t.Read(de(nil), func(e *p4v1.Entity) error { got = append(got, e); return nil }))
	if len(got) != 1 || !proto.Equal(got[0].GetDigestEntry().GetConfig(), cfg) {
		t.Errorf("digest entry read back %v", got)
	}
	must0(t, y.t.Write([]*p4v1.Update{Delete(de(nil))}))
	if d.Send(data) {
		t.Fatal("a deleted digest entry still sends")
	}
}

// TestBatchStatus: the gRPC form of a batch error comes back to the same
// statuses.
func TestBatchStatus(t *testing.T) {
	be := &BatchError{Kind: "update", Errs: []error{nil, status.Error(codes.NotFound, "a"), nil, status.Error(codes.OutOfRange, "b")}}
	back := UpdateError(be.Status().Err())
	var got *BatchError
	if !errors.As(back, &got) || len(got.Errs) != 4 || got.Errs[0] != nil || status.Code(got.Errs[3]) != codes.OutOfRange {
		t.Fatalf("round trip: %v", back)
	}
	if status.Code(back) != codes.NotFound || !strings.HasPrefix(status.Convert(back).Message(), "update 1: ") {
		t.Errorf("reads as %v", back)
	}
}

// FuzzTargetWrite applies arbitrary write batches and read queries to a
// Target with every kind of object: it must answer every update with a
// status (one per update), never panic, and keep its store and its
// bindings' view in step.
func FuzzTargetWrite(f *testing.F) {
	seed := &p4v1.WriteRequest{Updates: []*p4v1.Update{
		Insert(Table(acl(1, lpm([]byte{10, 0, 0, 0}, 8), ternary([]byte{6}, []byte{0xff}), rng([]byte{1}, []byte{2})))),
		Insert(MulticastGroup(5, []Replica{{1, 0}})),
		Modify(Register(&p4v1.RegisterEntry{RegisterId: 0x16000002, Data: &p4v1.P4Data{Data: &p4v1.P4Data_Bitstring{Bitstring: []byte{0x80}}}})),
		Insert(&p4v1.Entity{Entity: &p4v1.Entity_ActionProfileMember{ActionProfileMember: &p4v1.ActionProfileMember{ActionProfileId: 0x11000001, MemberId: 1, Action: set(1).GetAction()}}}),
	}}
	b, _ := proto.Marshal(seed)
	f.Add(b)
	f.Fuzz(func(t *testing.T, data []byte) {
		var req p4v1.WriteRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		y := newToy(t)
		err := y.t.Write(req.GetUpdates())
		var be *BatchError
		if err != nil && (!errors.As(err, &be) || len(be.Errs) != len(req.GetUpdates())) {
			t.Fatalf("write error %v is not a batch error of %d updates", err, len(req.GetUpdates()))
		}
		stored := map[string]bool{}
		for _, ti := range y.t.tableList {
			for k := range ti.entries {
				stored[ti.name+"/"+k] = true
			}
		}
		if len(stored) != len(y.entries) {
			t.Fatalf("store holds %d entries, bindings saw %d", len(stored), len(y.entries))
		}
		for k := range y.entries {
			if !stored[k] {
				t.Fatalf("binding holds %q, the store does not", k)
			}
		}
		if len(y.groups) != len(y.t.groups) {
			t.Fatalf("%d groups bound, %d stored", len(y.groups), len(y.t.groups))
		}
		var rq p4v1.ReadRequest
		if proto.Unmarshal(data, &rq) == nil {
			for _, q := range rq.GetEntities() {
				_ = y.t.Read(q, func(e *p4v1.Entity) error {
					if e.GetEntity() == nil {
						t.Fatal("read yielded an empty entity")
					}
					return nil
				})
			}
		}
	})
}

// FuzzBatchStatus decodes arbitrary gRPC statuses as batch results: never
// a panic; an OK status (an empty message) is no error.
func FuzzBatchStatus(f *testing.F) {
	be := &BatchError{Kind: "update", Errs: []error{nil, status.Error(codes.NotFound, "a")}}
	b, _ := proto.Marshal(be.Status().Proto())
	f.Add(b)
	f.Fuzz(func(t *testing.T, data []byte) {
		st := &rpcstatus.Status{}
		if proto.Unmarshal(data, st) != nil {
			return
		}
		err := UpdateError(status.ErrorProto(st))
		if (err == nil) != (codes.Code(st.GetCode()) == codes.OK) {
			t.Fatalf("status code %d gave error %v", st.GetCode(), err)
		}
		if err != nil {
			_ = status.Code(err)
			_ = err.Error()
		}
	})
}

// FuzzMatchCanonical decodes arbitrary matches of a table with every match
// kind: never a panic; an accepted match's canonical form decodes to the
// same key and is its own canonical form.
func FuzzMatchCanonical(f *testing.F) {
	seed := acl(2, lpm([]byte{0, 10, 0, 0, 0}, 8), ternary([]byte{6}, []byte{0, 0xff}), rng([]byte{1}, []byte{2}))
	b, _ := proto.Marshal(seed)
	f.Add(b)
	y := newToy(f)
	ti := y.t.tables[0x02000001]
	f.Fuzz(func(t *testing.T, data []byte) {
		var te p4v1.TableEntry
		if proto.Unmarshal(data, &te) != nil {
			return
		}
		fields, key, err := decodeMatch(ti, te.GetMatch(), te.GetPriority())
		if err != nil {
			if c := status.Code(err); c != codes.InvalidArgument && c != codes.OutOfRange && c != codes.Unimplemented {
				t.Fatalf("error code %v: %v", c, err)
			}
			return
		}
		canon := matchMessage(ti, fields)
		fields2, key2, err := decodeMatch(ti, canon, te.GetPriority())
		if err != nil || key2 != key {
			t.Fatalf("canonical match %v does not decode to the same key: %v", canon, err)
		}
		if !proto.Equal(&p4v1.TableEntry{Match: matchMessage(ti, fields2)}, &p4v1.TableEntry{Match: canon}) {
			t.Fatalf("canonical form is not a fixed point")
		}
	})
}

// TestRecorder: a Recorder keeps every update written through it, those
// the device refuses too, and passes the device's answer on.
func TestRecorder(t *testing.T) {
	y := newToy(t)
	rec := &Recorder{Device: y.t}
	bad := Insert(Table(&p4v1.TableEntry{TableId: 0xdead}))
	if err := rec.Write([]*p4v1.Update{bad}); err == nil {
		t.Fatal("an entry of an unknown table was accepted")
	}
	if len(rec.Updates) != 1 || rec.Updates[0] != bad {
		t.Errorf("recorded %v", rec.Updates)
	}
}
