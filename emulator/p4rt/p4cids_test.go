package p4rt

import (
	"fmt"
	"strings"
	"testing"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	"google.golang.org/protobuf/proto"
)

// TestAssignP4cIDs: ids are p4c's (core.p4's NoAction is 0x01445837 in
// every P4Info p4c emits), references follow their objects, and names
// whose hashes collide probe upwards in byte order.
func TestAssignP4cIDs(t *testing.T) {
	if got := P4cHash("NoAction")&0xffffff | 0x01000000; got != 21257015 {
		t.Errorf("NoAction: %d, p4c gives 21257015", got)
	}
	// Two action names whose hashes share their low 24 bits.
	seen := map[uint32]string{}
	var a, b string
	for i := 0; a == ""; i++ {
		n := fmt.Sprintf("c.a%d", i)
		h := P4cHash(n) & 0xffffff
		if o, ok := seen[h]; ok {
			a, b = o, n
			if b < a {
				a, b = b, a
			}
		}
		seen[h] = n
	}
	info := &p4configv1.P4Info{}
	bl := NewInfoBuilder(info, 1)
	x := bl.Action(b) // the larger name first: order of declaration does not matter
	y := bl.Action(a)
	bl.Action("NoAction")
	bl.Table("c.t", 16, nil, y, x, y)
	info.ActionProfiles = []*p4configv1.ActionProfile{{Preamble: Preamble(0x11000001, "c.p"), TableIds: []uint32{info.Tables[0].Preamble.Id}}}
	info.Tables[0].ImplementationId = 0x11000001
	AssignP4cIDs(info)
	want := 0x01000000 | P4cHash(a)&0xffffff
	ids := map[string]uint32{}
	for _, act := range info.Actions {
		ids[act.Preamble.Name] = act.Preamble.Id
	}
	if ids[a] != want || ids[b] != want+1 || ids["NoAction"] != 21257015 {
		t.Errorf("colliding %s, %s: ids %#x, %#x; want %#x, %#x", a, b, ids[a], ids[b], want, want+1)
	}
	tb := info.Tables[0]
	if tb.Preamble.Id != 0x02000000|P4cHash("c.t")&0xffffff {
		t.Errorf("table id %#x", tb.Preamble.Id)
	}
	if tb.ActionRefs[0].Id != ids[b] || tb.ActionRefs[1].Id != ids[a] || tb.InitialDefaultAction.ActionId != ids[a] {
		t.Errorf("table references %v, default %d not renamed", tb.ActionRefs, tb.InitialDefaultAction.ActionId)
	}
	p := info.ActionProfiles[0]
	if p.Preamble.Id != 0x11000000|P4cHash("c.p")&0xffffff || tb.ImplementationId != p.Preamble.Id || p.TableIds[0] != tb.Preamble.Id {
		t.Errorf("action profile %#x, implementation %#x, its table %#x", p.Preamble.Id, tb.ImplementationId, p.TableIds[0])
	}
}

// TestSameIDs: an object whose id differs, or that is missing, is named.
func TestSameIDs(t *testing.T) {
	info := &p4configv1.P4Info{}
	b := NewInfoBuilder(info, 1)
	a := b.Action("c.a", ParamSpec{Name: "p", Width: 8})
	b.Table("c.t", 16, []FieldSpec{{Name: "k", Width: 8, Kind: p4configv1.MatchField_EXACT}}, a, a)
	b.Counter("c.n", p4configv1.CounterSpec_PACKETS, 4)
	if err := SameIDs(info, info); err != nil {
		t.Fatalf("a P4Info differs from itself: %v", err)
	}
	other := proto.Clone(info).(*p4configv1.P4Info)
	other.Actions[0].Params[0].Id = 2
	other.Counters = nil
	AssignP4cIDs(other)
	err := SameIDs(info, other)
	for _, want := range []string{"table c.t: id", "action c.a param p: id 0x2, want 0x1", "counter c.n: missing"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not say %q", err, want)
		}
	}
}
