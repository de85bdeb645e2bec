package programs_test

import (
	"bytes"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tracebed/tracebed/emulator/p4rt"
)

// TestConformance runs every row of the P4Runtime 1.4.1 conformance table
// (docs/netns.md) against every program (fwd, ina, farmem, freeina) as a local
// Device (the sim substrate), on the Go switch over gRPC, and on bmv2's
// simple_switch_grpc where it is installed. A row that needs what a target
// or program lacks (the gRPC server, a multicast group, an action
// selector, packet I/O) skips, saying so.
func TestConformance(t *testing.T) {
	tgs, skip := targets(t)
	if skip != "" {
		t.Run("bmv2", func(t *testing.T) { t.Skip(skip) })
	}
	for _, tg := range tgs {
		t.Run(tg.name, func(t *testing.T) {
			for _, r := range rows {
				t.Run(r.name, func(t *testing.T) {
					if r.rpc && tg.kind == "local" {
						t.Skip("needs the P4Runtime gRPC server: a local Device has no RPCs")
					}
					if why, ok := bmv2Differs[r.name]; ok && tg.kind == "bmv2" {
						t.Skip("bmv2 answers otherwise (docs/netns.md, \"On bmv2\"): " + why)
					}
					r.run(t, tg.open(t))
				})
			}
		})
	}
}

// bmv2Differs lists the rows where bmv2's P4Runtime server (PI, with
// simple_switch_grpc 1.15.5) answers otherwise than the row expects, and
// how; docs/netns.md ("On bmv2") says which of the two follows the
// specification. Every other row passes on bmv2.
var bmv2Differs = map[string]string{
	"read-entire-forwarding-state":      "PI fails the whole read (UNKNOWN, \"Incorrect entity type\") at the wildcard ExternEntry instead of returning nothing for a kind the program lacks",
	"read-batch-partial-errors":         "PI fails the whole read (INVALID_ARGUMENT, \"Invalid P4 id\") at the bad query: no entities, no per-query errors",
	"read-entity-without-kind":          "UNKNOWN (\"Incorrect entity type\"), not INVALID_ARGUMENT",
	"multicast-group-metadata":          "PI does not keep MulticastGroupEntry.metadata: it reads back empty",
	"multicast-replica-port-as-written": "PI reads every replica's port back as port (canonical), also those written as egress_port",
	"is-const-in-write":                 "PI ignores is_const in a write (OK)",
	"member-in-use-delete":              "UNKNOWN (\"Error when deleting member on target\"), not FAILED_PRECONDITION",
	"unknown-member":                    "INVALID_ARGUMENT (\"Invalid member / group id\"), not NOT_FOUND",
	"keyless-table-insert":              "PI hands the INSERT to bmv2, which fails it: UNKNOWN, not INVALID_ARGUMENT",
	"modify-without-action":             "PI refuses a MODIFY without an action (INVALID_ARGUMENT, \"'action' field must be set\")",
	"value-wider-than-field":            "INVALID_ARGUMENT (\"Bytestring provided does not fit\"), not OUT_OF_RANGE",
	"index-negative":                    "PI refuses every register write (UNIMPLEMENTED, \"Register writes are not supported yet\"), so the index is never checked",
	"index-past-the-end":                "UNKNOWN (\"Error when writing to counter\"), not OUT_OF_RANGE",
	"counter-insert-delete":             "PI accepts a DELETE of a counter entry (OK)",
	"counter-modify-every-cell":         "UNIMPLEMENTED (\"Wildcard write is not supported for indirect counters yet\")",
	"device-id-zero":                    "PERMISSION_DENIED (\"Not primary\"): PI checks the election id before the device id",
	"write-unknown-role":                "PI applies a write for a role no controller took (OK)",
	"arbitration-role-config":           "PI accepts any role.config (OK)",
	"commit-with-config":                "UNKNOWN (\"Error in second phase of device update\"), not INVALID_ARGUMENT",
	"commit-without-save":               "UNKNOWN (\"Error in second phase of device update\"), not NOT_FOUND",
	"verify-and-save-then-commit":       "after VERIFY_AND_SAVE, GetForwardingPipelineConfig returns the saved config's cookie, not the running one's",
}

// TestConformanceDocumented keeps docs/netns.md's table in step with the
// rows: every row is listed there by name.
func TestConformanceDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/netns.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if !bytes.Contains(doc, []byte("`"+r.name+"`")) {
			t.Errorf("docs/netns.md does not list conformance row `%s` (§%s)", r.name, r.section)
		}
	}
	_, onBMv2, ok := bytes.Cut(doc, []byte("### On bmv2"))
	if !ok {
		t.Fatal(`docs/netns.md has no section "On bmv2"`)
	}
	for name := range bmv2Differs {
		if !bytes.Contains(onBMv2, []byte("| `"+name+"` |")) {
			t.Errorf("docs/netns.md, On bmv2, does not list row `%s`, where bmv2 answers otherwise", name)
		}
	}
}

// row is one rule of P4Runtime 1.4.1 and its check.
type row struct {
	name    string // as listed in docs/netns.md
	section string // of the P4Runtime 1.4.1 specification
	rpc     bool   // needs the gRPC server
	run     func(t *testing.T, h *harness)
}

var rows = []row{
	{"batch-continue-on-error", "12.2, 12.3", false, func(t *testing.T, h *harness) {
		h.must(h.write(p4rt.Insert(p4rt.Table(h.entry(0)))))
		err := h.write(p4rt.Insert(p4rt.Table(h.entry(1))), p4rt.Insert(p4rt.Table(h.entry(0))),
			p4rt.Insert(p4rt.Table(h.entry(2))), p4rt.Modify(p4rt.Table(h.entry(3))))
		be := batchOf(t, err)
		if len(be.Errs) != 4 || be.Errs[0] != nil || be.Errs[2] != nil {
			t.Fatalf("statuses %v: want updates 0 and 2 OK", be.Errs)
		}
		wantCode(t, "update 1 (INSERT of an existing entry)", be.Errs[1], codes.AlreadyExists)
		wantCode(t, "update 3 (MODIFY of a missing entry)", be.Errs[3], codes.NotFound)
		if msg := status.Convert(err).Message(); !strings.HasPrefix(msg, "update 1:") {
			t.Errorf("first failure reported as %q, want update 1", msg)
		}
		got, err := h.read(p4rt.Table(&p4v1.TableEntry{TableId: h.entry(0).GetTableId()}))
		h.must(err)
		for _, i := range []int{0, 1, 2} {
			if !containsKey(got, h.entry(i)) {
				t.Errorf("entry %d missing after the batch", i)
			}
		}
	}},
	{"read-default-entry-only", "9.1.6", false, func(t *testing.T, h *harness) {
		h.must(h.write(p4rt.Insert(p4rt.Table(h.entry(0)))))
		for _, tb := range h.n.P4Info().GetTables() {
			got, err := h.read(p4rt.Table(&p4v1.TableEntry{TableId: tb.GetPreamble().GetId(), IsDefaultAction: true}))
			h.must(err)
			if len(got) > 1 {
				t.Errorf("table %s: %d entries for is_default_action", tb.GetPreamble().GetName(), len(got))
			}
			for _, e := range got {
				if !e.GetTableEntry().GetIsDefaultAction() || e.GetTableEntry().GetTableId() != tb.GetPreamble().GetId() {
					t.Errorf("table %s: read %v for is_default_action", tb.GetPreamble().GetName(), e)
				}
			}
		}
	}},
	{"read-entire-forwarding-state", "13.2", false, func(t *testing.T, h *harness) {
		h.must(h.write(p4rt.Insert(p4rt.Table(h.entry(0)))))
		got, err := h.read(
			&p4v1.Entity{Entity: &p4v1.Entity_ExternEntry{ExternEntry: &p4v1.ExternEntry{}}},
			p4rt.Table(&p4v1.TableEntry{}),
			&p4v1.Entity{Entity: &p4v1.Entity_ActionProfileMember{ActionProfileMember: &p4v1.ActionProfileMember{}}},
			&p4v1.Entity{Entity: &p4v1.Entity_ActionProfileGroup{ActionProfileGroup: &p4v1.ActionProfileGroup{}}},
			&p4v1.Entity{Entity: &p4v1.Entity_MeterEntry{MeterEntry: &p4v1.MeterEntry{}}},
			&p4v1.Entity{Entity: &p4v1.Entity_DirectMeterEntry{DirectMeterEntry: &p4v1.DirectMeterEntry{}}},
			counterEntity(0, nil, nil),
			&p4v1.Entity{Entity: &p4v1.Entity_DirectCounterEntry{DirectCounterEntry: &p4v1.DirectCounterEntry{}}},
			&p4v1.Entity{Entity: &p4v1.Entity_ValueSetEntry{ValueSetEntry: &p4v1.ValueSetEntry{}}},
			&p4v1.Entity{Entity: &p4v1.Entity_RegisterEntry{RegisterEntry: &p4v1.RegisterEntry{}}},
			groupOf(0, nil),
			&p4v1.Entity{Entity: &p4v1.Entity_PacketReplicationEngineEntry{PacketReplicationEngineEntry: &p4v1.PacketReplicationEngineEntry{
				Type: &p4v1.PacketReplicationEngineEntry_CloneSessionEntry{CloneSessionEntry: &p4v1.CloneSessionEntry{}}}}},
			&p4v1.Entity{Entity: &p4v1.Entity_DigestEntry{DigestEntry: &p4v1.DigestEntry{}}},
		)
		if err != nil {
			t.Fatalf("read of every entity kind: %v", err)
		}
		if !containsKey(got, h.entry(0)) {
			t.Error("the entry written is not in the forwarding state")
		}
	}},
	{"read-batch-partial-errors", "13.3", false, func(t *testing.T, h *harness) {
		e := h.entry(0)
		h.must(h.write(p4rt.Insert(p4rt.Table(e))))
		got, err := h.read(p4rt.Table(&p4v1.TableEntry{TableId: e.GetTableId()}),
			p4rt.Table(&p4v1.TableEntry{TableId: 0x02fffff0}), counterEntity(0, nil, nil))
		be := batchOf(t, err)
		if len(be.Errs) != 3 || be.Errs[0] != nil || be.Errs[1] == nil || be.Errs[2] != nil {
			t.Fatalf("statuses %v: want only query 1 to fail", be.Errs)
		}
		wantCode(t, "query 1 (no such table)", be.Errs[1], codes.NotFound)
		if !containsKey(got, e) {
			t.Error("the good queries' entities were not returned")
		}
	}},
	{"table-entry-metadata", "9.1", false, func(t *testing.T, h *harness) {
		e := h.entry(0)
		e.Metadata, e.ControllerMetadata = []byte("tracebed\x00meta"), 0xfeed
		h.must(h.write(p4rt.Insert(p4rt.Table(e))))
		got := readOne(t, h, e)
		if !bytes.Equal(got.GetMetadata(), e.Metadata) || got.GetControllerMetadata() != e.ControllerMetadata {
			t.Errorf("read back metadata %q, controller_metadata %#x", got.GetMetadata(), got.GetControllerMetadata())
		}
	}},
	{"multicast-group-metadata", "9.5.1", false, func(t *testing.T, h *harness) {
		g := groupOf(77, []byte("group meta"), &p4v1.Replica{PortKind: &p4v1.Replica_Port{Port: []byte{1}}, Instance: 1})
		needMulticast(t, h.write(p4rt.Insert(g)))
		got, err := h.read(groupOf(77, nil))
		h.must(err)
		if len(got) != 1 || string(got[0].GetPacketReplicationEngineEntry().GetMulticastGroupEntry().GetMetadata()) != "group meta" {
			t.Errorf("read back %v", got)
		}
	}},
	{"multicast-replica-port-as-written", "9.5.1, 8.2", false, func(t *testing.T, h *harness) {
		g := groupOf(78, nil, &p4v1.Replica{PortKind: &p4v1.Replica_EgressPort{EgressPort: 1}, Instance: 1},
			&p4v1.Replica{PortKind: &p4v1.Replica_Port{Port: []byte{0, 2}}, Instance: 2})
		needMulticast(t, h.write(p4rt.Insert(g)))
		got, err := h.read(groupOf(78, nil))
		h.must(err)
		if len(got) != 1 {
			t.Fatalf("read back %v", got)
		}
		reps := got[0].GetPacketReplicationEngineEntry().GetMulticastGroupEntry().GetReplicas()
		if len(reps) != 2 || reps[0].GetEgressPort() != 1 || !bytes.Equal(reps[1].GetPort(), []byte{2}) {
			t.Errorf("replicas read back %v: want egress_port 1 as written, then port \"\\x02\" (canonical)", reps)
		}
	}},
	{"is-const-in-write", "9.1", false, func(t *testing.T, h *harness) {
		e := h.entry(0)
		e.IsConst = true
		wantCode(t, "INSERT with is_const", h.write(p4rt.Insert(p4rt.Table(e))), codes.InvalidArgument)
	}},
	{"idle-timeout-unsupported", "9.1.8", false, func(t *testing.T, h *harness) {
		e := h.entry(0)
		if tableOf(h, e.GetTableId()).GetIdleTimeoutBehavior() != p4configv1.Table_NO_TIMEOUT {
			t.Skip("the fixture's table supports idle timeout")
		}
		e.IdleTimeoutNs = 1e9
		wantCode(t, "INSERT with idle_timeout_ns", h.write(p4rt.Insert(p4rt.Table(e))), codes.InvalidArgument)
	}},
	{"group-weight-zero", "9.2.2", false, func(t *testing.T, h *harness) {
		ap, _, a := needSelector(t, h)
		h.must(h.write(p4rt.Insert(memberEntity(ap.GetPreamble().GetId(), 1, a))))
		wantCode(t, "group with a member of weight 0", h.write(p4rt.Insert(groupEntity(ap.GetPreamble().GetId(), 1, 2,
			&p4v1.ActionProfileGroup_Member{MemberId: 1, Weight: 0}))), codes.InvalidArgument)
	}},
	{"group-modify-max-size", "9.2.2", false, func(t *testing.T, h *harness) {
		ap, _, a := needSelector(t, h)
		id := ap.GetPreamble().GetId()
		h.must(h.write(p4rt.Insert(memberEntity(id, 1, a))))
		h.must(h.write(p4rt.Insert(groupEntity(id, 1, 2, &p4v1.ActionProfileGroup_Member{MemberId: 1, Weight: 1}))))
		wantCode(t, "MODIFY changing max_size", h.write(p4rt.Modify(groupEntity(id, 1, 4,
			&p4v1.ActionProfileGroup_Member{MemberId: 1, Weight: 1}))), codes.InvalidArgument)
	}},
	{"one-shot-weights-above-max-group-size", "9.2.3", false, func(t *testing.T, h *harness) {
		ap, tb, a := needSelector(t, h)
		if ap.GetMaxGroupSize() <= 0 || ap.GetSumOfMembers() != nil {
			t.Skip("the selector has no max_group_size on the sum of weights")
		}
		ms, prio := genericMatch(tb, 9)
		te := &p4v1.TableEntry{TableId: tb.GetPreamble().GetId(), Match: ms, Priority: prio, Action: &p4v1.TableAction{
			Type: &p4v1.TableAction_ActionProfileActionSet{ActionProfileActionSet: &p4v1.ActionProfileActionSet{
				ActionProfileActions: []*p4v1.ActionProfileAction{{Action: a, Weight: ap.GetMaxGroupSize() + 1}}}}}}
		wantCode(t, "one-shot weight above max_group_size", h.write(p4rt.Insert(p4rt.Table(te))), codes.InvalidArgument)
	}},
	{"one-shot-read-as-written", "9.2.3", false, func(t *testing.T, h *harness) {
		_, tb, a := needSelector(t, h)
		ms, prio := genericMatch(tb, 11)
		set := &p4v1.ActionProfileActionSet{ActionProfileActions: []*p4v1.ActionProfileAction{{Action: a, Weight: 1}, {Action: a, Weight: 2}}}
		te := &p4v1.TableEntry{TableId: tb.GetPreamble().GetId(), Match: ms, Priority: prio,
			Action: &p4v1.TableAction{Type: &p4v1.TableAction_ActionProfileActionSet{ActionProfileActionSet: set}}}
		h.must(h.write(p4rt.Insert(p4rt.Table(te))))
		got := readOne(t, h, te).GetAction().GetActionProfileActionSet()
		if !proto.Equal(got, set) {
			t.Errorf("one-shot set read back %v, want %v (not coalesced)", got, set)
		}
	}},
	{"member-in-use-delete", "9.2.1", false, func(t *testing.T, h *harness) {
		ap, _, a := needSelector(t, h)
		id := ap.GetPreamble().GetId()
		h.must(h.write(p4rt.Insert(memberEntity(id, 1, a))))
		h.must(h.write(p4rt.Insert(groupEntity(id, 1, 2, &p4v1.ActionProfileGroup_Member{MemberId: 1, Weight: 1}))))
		wantCode(t, "DELETE of a member in a group", h.write(p4rt.Delete(memberEntity(id, 1, nil))), codes.FailedPrecondition)
	}},
	{"unknown-member", "9.1.2", false, func(t *testing.T, h *harness) {
		_, tb, _ := needSelector(t, h)
		ms, prio := genericMatch(tb, 12)
		te := &p4v1.TableEntry{TableId: tb.GetPreamble().GetId(), Match: ms, Priority: prio,
			Action: &p4v1.TableAction{Type: &p4v1.TableAction_ActionProfileMemberId{ActionProfileMemberId: 999}}}
		wantCode(t, "entry of an unknown member", h.write(p4rt.Insert(p4rt.Table(te))), codes.NotFound)
	}},
	{"default-entry-insert-delete", "9.1.3", false, func(t *testing.T, h *harness) {
		def := defaultOf(t, h, h.entry(0).GetTableId())
		wantCode(t, "INSERT of the default entry", h.write(p4rt.Insert(p4rt.Table(def))), codes.InvalidArgument)
		wantCode(t, "DELETE of the default entry", h.write(p4rt.Delete(p4rt.Table(def))), codes.InvalidArgument)
	}},
	{"default-entry-with-match", "9.1.3", false, func(t *testing.T, h *harness) {
		e := h.entry(0)
		def := defaultOf(t, h, e.GetTableId())
		def.Match = e.Match
		wantCode(t, "MODIFY of the default entry with a match key", h.write(p4rt.Modify(p4rt.Table(def))), codes.InvalidArgument)
	}},
	{"default-entry-modify", "9.1.3", false, func(t *testing.T, h *harness) {
		for _, tb := range h.n.P4Info().GetTables() {
			if tb.GetConstDefaultActionId() != 0 {
				continue
			}
			def := defaultOf(t, h, tb.GetPreamble().GetId())
			if def.GetAction() == nil {
				continue
			}
			h.must(h.write(p4rt.Modify(p4rt.Table(def))))
			reset := &p4v1.TableEntry{TableId: def.GetTableId(), IsDefaultAction: true}
			h.must(h.write(p4rt.Modify(p4rt.Table(reset))))
			if got := defaultOf(t, h, def.GetTableId()); !proto.Equal(got.GetAction(), def.GetAction()) {
				t.Errorf("table %s: default after a reset %v, want %v", tb.GetPreamble().GetName(), got.GetAction(), def.GetAction())
			}
			return
		}
		t.Skip("no table with a default action that is not const")
	}},
	{"defaultonly-action-in-entry", "9.1.2", false, func(t *testing.T, h *harness) {
		for _, tb := range h.n.P4Info().GetTables() {
			if tb.GetImplementationId() != 0 || len(tb.GetMatchFields()) == 0 {
				continue
			}
			for _, ref := range tb.GetActionRefs() {
				if ref.GetScope() != p4configv1.ActionRef_DEFAULT_ONLY {
					continue
				}
				ms, prio := genericMatch(tb, 1)
				te := &p4v1.TableEntry{TableId: tb.GetPreamble().GetId(), Match: ms, Priority: prio,
					Action: &p4v1.TableAction{Type: &p4v1.TableAction_Action{Action: zeroAction(actionByID(h.n.P4Info(), ref.GetId()))}}}
				wantCode(t, "entry running a @defaultonly action", h.write(p4rt.Insert(p4rt.Table(te))), codes.PermissionDenied)
				return
			}
		}
		t.Skip("no direct table with a @defaultonly action")
	}},
	{"keyless-table-insert", "9.1", false, func(t *testing.T, h *harness) {
		for _, tb := range h.n.P4Info().GetTables() {
			if len(tb.GetMatchFields()) > 0 || tb.GetImplementationId() != 0 || len(tb.GetActionRefs()) == 0 {
				continue
			}
			te := &p4v1.TableEntry{TableId: tb.GetPreamble().GetId(), Action: &p4v1.TableAction{Type: &p4v1.TableAction_Action{
				Action: zeroAction(actionByID(h.n.P4Info(), tb.GetActionRefs()[0].GetId()))}}}
			wantCode(t, "INSERT into a keyless table", h.write(p4rt.Insert(p4rt.Table(te))), codes.InvalidArgument)
			return
		}
		t.Skip("no keyless table")
	}},
	{"priority-on-exact-table", "9.1", false, func(t *testing.T, h *harness) {
		e := h.entry(0)
		for _, mf := range tableOf(h, e.GetTableId()).GetMatchFields() {
			if mf.GetMatchType() != p4configv1.MatchField_EXACT {
				t.Skip("the fixture's table needs priorities")
			}
		}
		e.Priority = 5
		wantCode(t, "priority on an exact table", h.write(p4rt.Insert(p4rt.Table(e))), codes.InvalidArgument)
	}},
	{"modify-without-action", "9.1.2", false, func(t *testing.T, h *harness) {
		e := h.entry(0)
		e.Metadata = []byte("before")
		h.must(h.write(p4rt.Insert(p4rt.Table(e))))
		m := &p4v1.TableEntry{TableId: e.TableId, Match: e.Match, Priority: e.Priority, Metadata: []byte("after")}
		h.must(h.write(p4rt.Modify(p4rt.Table(m))))
		if got := readOne(t, h, e); !proto.Equal(got.GetAction(), e.GetAction()) || string(got.GetMetadata()) != "before" {
			t.Errorf("after a MODIFY without an action: %v", got)
		}
	}},
	{"delete-ignores-non-key-fields", "9.1, 12", false, func(t *testing.T, h *harness) {
		e := h.entry(0)
		h.must(h.write(p4rt.Insert(p4rt.Table(e))))
		d := &p4v1.TableEntry{TableId: e.TableId, Match: e.Match, Priority: e.Priority, Metadata: []byte("x"),
			Action: &p4v1.TableAction{Type: &p4v1.TableAction_Action{Action: &p4v1.Action{ActionId: 0xdead}}}}
		h.must(h.write(p4rt.Delete(p4rt.Table(d))))
	}},
	{"existence", "12", false, func(t *testing.T, h *harness) {
		e := h.entry(0)
		wantCode(t, "MODIFY of a missing entry", h.write(p4rt.Modify(p4rt.Table(e))), codes.NotFound)
		wantCode(t, "DELETE of a missing entry", h.write(p4rt.Delete(p4rt.Table(e))), codes.NotFound)
		h.must(h.write(p4rt.Insert(p4rt.Table(e))))
		wantCode(t, "INSERT of an existing entry", h.write(p4rt.Insert(p4rt.Table(e))), codes.AlreadyExists)
	}},
	{"value-wider-than-field", "8.3", false, func(t *testing.T, h *harness) {
		e := h.entry(0)
		for _, m := range e.Match {
			if x := m.GetExact(); x != nil {
				w := fieldWidth(tableOf(h, e.TableId), m.GetFieldId())
				x.Value = append([]byte{1}, make([]byte, (w+7)/8)...)
				if w%8 != 0 {
					x.Value = p4rt.EncodeUint(1 << uint(w))
				}
				wantCode(t, "match value wider than its field", h.write(p4rt.Insert(p4rt.Table(e))), codes.OutOfRange)
				return
			}
		}
		t.Skip("the fixture's entry has no exact field")
	}},
	{"zero-padding-accepted-canonical-read", "8.3", false, func(t *testing.T, h *harness) {
		e := h.entry(0)
		padded := proto.Clone(e).(*p4v1.TableEntry)
		for _, m := range padded.Match {
			if x := m.GetExact(); x != nil {
				x.Value = pad(x.Value)
			}
		}
		for _, p := range actionParams(padded.GetAction()) {
			p.Value = pad(p.Value)
		}
		h.must(h.write(p4rt.Insert(p4rt.Table(padded))))
		got := readOne(t, h, e)
		if !proto.Equal(got.GetAction(), e.GetAction()) || !sameMatch(got.GetMatch(), e.GetMatch()) {
			t.Errorf("read back %v, want the canonical %v", got, e)
		}
	}},
	{"index-negative", "9.3.2, 9.7", false, func(t *testing.T, h *harness) {
		c := programCounter(t, h)
		wantCode(t, "counter MODIFY at index -1", h.write(p4rt.Modify(counterEntity(c.GetPreamble().GetId(), &p4v1.Index{Index: -1}, &p4v1.CounterData{}))), codes.InvalidArgument)
		for _, r := range h.n.P4Info().GetRegisters() {
			re := &p4v1.RegisterEntry{RegisterId: r.GetPreamble().GetId(), Index: &p4v1.Index{Index: -1},
				Data: &p4v1.P4Data{Data: &p4v1.P4Data_Bitstring{Bitstring: []byte{0}}}}
			wantCode(t, "register MODIFY at index -1", h.write(p4rt.Modify(p4rt.Register(re))), codes.InvalidArgument)
			break
		}
	}},
	{"index-past-the-end", "9.3.2, 9.7", false, func(t *testing.T, h *harness) {
		c := programCounter(t, h)
		wantCode(t, "counter MODIFY past the end", h.write(p4rt.Modify(counterEntity(c.GetPreamble().GetId(), &p4v1.Index{Index: c.GetSize()}, &p4v1.CounterData{}))), codes.OutOfRange)
	}},
	{"counter-insert-delete", "9.3.2", false, func(t *testing.T, h *harness) {
		c := programCounter(t, h)
		e := counterEntity(c.GetPreamble().GetId(), &p4v1.Index{Index: 0}, &p4v1.CounterData{})
		wantCode(t, "counter INSERT", h.write(p4rt.Insert(e)), codes.InvalidArgument)
		wantCode(t, "counter DELETE", h.write(p4rt.Delete(e)), codes.InvalidArgument)
	}},
	{"counter-modify-every-cell", "9.3.2", false, func(t *testing.T, h *harness) {
		c := programCounter(t, h)
		h.must(h.write(p4rt.Modify(counterEntity(c.GetPreamble().GetId(), nil, &p4v1.CounterData{PacketCount: 7}))))
		got, err := h.read(counterEntity(c.GetPreamble().GetId(), nil, nil))
		h.must(err)
		if int64(len(got)) != c.GetSize() {
			t.Fatalf("%d cells read, counter has %d", len(got), c.GetSize())
		}
		for _, e := range got {
			if e.GetCounterEntry().GetData().GetPacketCount() != 7 {
				t.Fatalf("cell %v after a MODIFY without an index", e.GetCounterEntry())
			}
		}
	}},
	{"read-entity-without-kind", "13.2", false, func(t *testing.T, h *harness) {
		_, err := h.read(&p4v1.Entity{})
		wantCode(t, "read of an empty entity", err, codes.InvalidArgument)
	}},
	{"digests", "9.8, 16.3", false, func(t *testing.T, h *harness) {
		if len(h.n.P4Info().GetDigests()) == 0 {
			t.Skip("the program declares no digest (TestDigests in emulator/switch covers a program that does)")
		}
	}},
	// Rows of the gRPC service.
	{"device-id-zero", "5.3, 12", true, func(t *testing.T, h *harness) {
		if h.tg.deviceID != 0 {
			t.Skip("the target runs with another device id")
		}
		h.must(h.write(p4rt.Insert(p4rt.Table(h.entry(0)))))
		_, err := h.raw.Write(h.ctx, &p4v1.WriteRequest{DeviceId: 1, ElectionId: h.id, Updates: []*p4v1.Update{p4rt.Insert(p4rt.Table(h.entry(1)))}})
		wantCode(t, "write to device 1 of a switch that is device 0", err, codes.NotFound)
	}},
	{"write-from-backup", "5, 12", true, func(t *testing.T, h *harness) {
		b := h.tg.dial(t, h.id.GetLow()-1, true)
		wantCode(t, "write from a backup", b.Write(h.ctx, p4rt.Insert(p4rt.Table(h.entry(0)))), codes.PermissionDenied)
	}},
	{"write-unknown-role", "12", true, func(t *testing.T, h *harness) {
		_, err := h.raw.Write(h.ctx, &p4v1.WriteRequest{DeviceId: h.tg.deviceID, Role: "nobody", ElectionId: h.id,
			Updates: []*p4v1.Update{p4rt.Insert(p4rt.Table(h.entry(0)))}})
		wantCode(t, "write for a role no controller took", err, codes.NotFound)
	}},
	{"arbitration-duplicate-election-id", "5.3", true, func(t *testing.T, h *harness) {
		wantCode(t, "second stream with the primary's election id", arbitrate(t, h, h.tg.deviceID, h.id, nil, nil), codes.InvalidArgument)
	}},
	{"arbitration-role-config", "5.2, 5.3", true, func(t *testing.T, h *harness) {
		cfg, _ := anypb.New(wrapperspb.String("full access"))
		wantCode(t, "arbitration with role.config", arbitrate(t, h, h.tg.deviceID, &p4v1.Uint128{Low: 1}, &p4v1.Role{Name: "r", Config: cfg}, nil), codes.InvalidArgument)
	}},
	{"arbitration-device-change", "5.3", true, func(t *testing.T, h *harness) {
		second := &p4v1.MasterArbitrationUpdate{DeviceId: h.tg.deviceID + 1, ElectionId: &p4v1.Uint128{Low: 2}}
		wantCode(t, "re-arbitration with another device id", arbitrate(t, h, h.tg.deviceID, &p4v1.Uint128{Low: 2}, nil, second), codes.FailedPrecondition)
	}},
	{"capabilities", "17", true, func(t *testing.T, h *harness) {
		v, err := h.g.Capabilities(h.ctx)
		h.must(err)
		if h.tg.kind == "goswitch" && v != "1.4.1" || v == "" {
			t.Errorf("p4runtime_api_version %q", v)
		}
	}},
	{"commit-with-config", "14", true, func(t *testing.T, h *harness) {
		_, err := h.raw.SetForwardingPipelineConfig(h.ctx, &p4v1.SetForwardingPipelineConfigRequest{DeviceId: h.tg.deviceID, ElectionId: h.id,
			Action: p4v1.SetForwardingPipelineConfigRequest_COMMIT, Config: &p4v1.ForwardingPipelineConfig{P4Info: h.tg.info, P4DeviceConfig: h.tg.devConfig}})
		wantCode(t, "COMMIT with a config", err, codes.InvalidArgument)
	}},
	{"commit-without-save", "14", true, func(t *testing.T, h *harness) {
		_, err := h.raw.SetForwardingPipelineConfig(h.ctx, &p4v1.SetForwardingPipelineConfigRequest{DeviceId: h.tg.deviceID, ElectionId: h.id,
			Action: p4v1.SetForwardingPipelineConfigRequest_COMMIT})
		wantCode(t, "COMMIT with nothing saved", err, codes.NotFound)
	}},
	{"verify-and-save-then-commit", "14, 15", true, verifySaveCommit},
	{"packet-out", "16.1", true, func(t *testing.T, h *harness) {
		w := needPacketIO(t, h)
		f := udpFrame(h.tg.top, "h1", netip.MustParseAddr("10.250.0.1"))
		h.must(h.g.PacketOut(f, &p4v1.PacketMetadata{MetadataId: 1, Value: []byte{2}}))
		got, ok := w.recv(2, 2*time.Second)
		if !ok || !bytes.Equal(got, f) {
			t.Fatalf("packet-out to port 2: received %x, %v; want the payload unchanged", got, ok)
		}
	}},
	{"packet-out-bad-metadata", "16.1, 16.6", true, func(t *testing.T, h *harness) {
		needPacketIO(t, h)
		f := udpFrame(h.tg.top, "h1", netip.MustParseAddr("10.250.0.1"))
		h.must(h.g.PacketOut(f, &p4v1.PacketMetadata{MetadataId: 7, Value: []byte{2}}))
		e := nextMessage(t, h, func(m *p4v1.StreamMessageResponse) bool { return m.GetError() != nil }).GetError()
		if codes.Code(e.GetCanonicalCode()) != codes.InvalidArgument || e.GetPacketOut() == nil {
			t.Errorf("stream error %v, want INVALID_ARGUMENT about the packet-out", e)
		}
	}},
	{"packet-in-on-table-miss", "16.1", true, func(t *testing.T, h *harness) {
		w := needPacketIO(t, h)
		te, err := h.tg.fix.punt.missToCPU(h.n)
		h.must(err)
		h.must(h.write(p4rt.Modify(p4rt.Table(te))))
		f := udpFrame(h.tg.top, "h1", netip.MustParseAddr("10.250.0.1"))
		w.send(t, 1, f)
		checkPacketIn(t, h, f, 1)
	}},
	{"packet-in-by-action", "16.1", true, func(t *testing.T, h *harness) {
		w := needPacketIO(t, h)
		dst := netip.MustParseAddr("10.250.0.2")
		te, err := h.tg.fix.punt.route(h.n, dst)
		h.must(err)
		h.must(h.write(p4rt.Insert(p4rt.Table(te))))
		f := udpFrame(h.tg.top, "h2", dst)
		w.send(t, 2, f)
		checkPacketIn(t, h, f, 2)
	}},
}

// verifySaveCommit: after VERIFY_AND_SAVE, reads and writes refer to the
// saved program (fresh state) while packets and GetForwardingPipelineConfig
// still see the running one, until COMMIT.
func verifySaveCommit(t *testing.T, h *harness) {
	e0, e1 := h.entry(0), h.entry(1)
	h.must(h.write(p4rt.Insert(p4rt.Table(e0))))
	_, err := h.raw.SetForwardingPipelineConfig(h.ctx, &p4v1.SetForwardingPipelineConfigRequest{DeviceId: h.tg.deviceID, ElectionId: h.id,
		Action: p4v1.SetForwardingPipelineConfigRequest_VERIFY_AND_SAVE, Config: &p4v1.ForwardingPipelineConfig{
			P4Info: h.tg.info, P4DeviceConfig: h.tg.devConfig, Cookie: &p4v1.ForwardingPipelineConfig_Cookie{Cookie: 2}}})
	h.must(err)
	if c := cookie(t, h); c != 1 {
		t.Errorf("cookie %d after VERIFY_AND_SAVE, want the running config's 1", c)
	}
	if got, _ := h.read(p4rt.Table(e0)); len(got) != 0 {
		t.Errorf("after VERIFY_AND_SAVE a read still sees the running program's entry")
	}
	h.must(h.write(p4rt.Insert(p4rt.Table(e1))))
	w := h.tg.wires
	if p := h.tg.fix.punt; p != nil && w != nil {
		// The saved program sends misses to the controller; packets still
		// meet the running one, which drops them.
		te, err := p.missToCPU(h.n)
		h.must(err)
		h.must(h.write(p4rt.Modify(p4rt.Table(te))))
		w.send(t, 1, udpFrame(h.tg.top, "h1", netip.MustParseAddr("10.250.0.3")))
		if m := waitMessage(h, 300*time.Millisecond); m != nil {
			t.Errorf("a packet met the saved program before COMMIT: %v", m)
		}
	}
	_, err = h.raw.SetForwardingPipelineConfig(h.ctx, &p4v1.SetForwardingPipelineConfigRequest{DeviceId: h.tg.deviceID, ElectionId: h.id,
		Action: p4v1.SetForwardingPipelineConfigRequest_COMMIT})
	h.must(err)
	if c := cookie(t, h); c != 2 {
		t.Errorf("cookie %d after COMMIT, want 2", c)
	}
	if got, _ := h.read(p4rt.Table(e1)); len(got) != 1 {
		t.Errorf("the entry written after VERIFY_AND_SAVE is gone after COMMIT")
	}
	if got, _ := h.read(p4rt.Table(e0)); len(got) != 0 {
		t.Errorf("the running program's entry survived COMMIT")
	}
	if h.tg.fix.punt != nil && w != nil {
		f := udpFrame(h.tg.top, "h1", netip.MustParseAddr("10.250.0.4"))
		w.send(t, 1, f)
		checkPacketIn(t, h, f, 1)
	}
}

func cookie(t *testing.T, h *harness) uint64 {
	t.Helper()
	resp, err := h.raw.GetForwardingPipelineConfig(h.ctx, &p4v1.GetForwardingPipelineConfigRequest{DeviceId: h.tg.deviceID,
		ResponseType: p4v1.GetForwardingPipelineConfigRequest_COOKIE_ONLY})
	h.must(err)
	return resp.GetConfig().GetCookie().GetCookie()
}

// arbitrate opens a stream, sends an arbitration update (and then next,
// if given) and returns the error that ends the stream, or nil if the
// switch answered without ending it.
func arbitrate(t *testing.T, h *harness, device uint64, id *p4v1.Uint128, role *p4v1.Role, next *p4v1.MasterArbitrationUpdate) error {
	t.Helper()
	st, err := h.raw.StreamChannel(h.ctx)
	h.must(err)
	defer st.CloseSend()
	h.must(st.Send(&p4v1.StreamMessageRequest{Update: &p4v1.StreamMessageRequest_Arbitration{
		Arbitration: &p4v1.MasterArbitrationUpdate{DeviceId: device, ElectionId: id, Role: role}}}))
	if next != nil {
		if _, err := st.Recv(); err != nil {
			return err
		}
		h.must(st.Send(&p4v1.StreamMessageRequest{Update: &p4v1.StreamMessageRequest_Arbitration{Arbitration: next}}))
	}
	for {
		m, err := st.Recv()
		if err != nil {
			return err
		}
		if m.GetArbitration() != nil && next == nil {
			return nil
		}
	}
}

func needMulticast(t *testing.T, err error) {
	t.Helper()
	if status.Code(err) == codes.Unimplemented {
		t.Skipf("the program uses no multicast groups: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// needSelector returns the program's action selector, a table it
// implements and an action its members may run.
func needSelector(t *testing.T, h *harness) (*p4configv1.ActionProfile, *p4configv1.Table, *p4v1.Action) {
	t.Helper()
	ap, tb := selector(h.n.P4Info())
	if ap == nil || h.tg.fix.memberAction == nil {
		t.Skip("the program has no action selector")
	}
	a, err := h.tg.fix.memberAction(h.n)
	h.must(err)
	return ap, tb, a
}

// needPacketIO returns the Go switch's ports for a program with packet I/O.
func needPacketIO(t *testing.T, h *harness) *wires {
	t.Helper()
	if h.tg.fix.punt == nil {
		t.Skip("the program declares no controller packet metadata")
	}
	if h.tg.wires == nil {
		t.Skip("the target has no ports the test can reach (bmv2 runs here without interfaces)")
	}
	h.tg.wires.drain()
	return h.tg.wires
}

func waitMessage(h *harness, d time.Duration) *p4v1.StreamMessageResponse {
	select {
	case m := <-h.g.Messages():
		return m
	case <-time.After(d):
		return nil
	}
}

func nextMessage(t *testing.T, h *harness, want func(*p4v1.StreamMessageResponse) bool) *p4v1.StreamMessageResponse {
	t.Helper()
	deadline := time.After(3 * time.Second)
	for {
		select {
		case m, ok := <-h.g.Messages():
			if !ok {
				t.Fatal("the stream ended")
			}
			if want(m) {
				return m
			}
		case <-deadline:
			t.Fatal("no such stream message within 3s")
		}
	}
}

// checkPacketIn waits for a packet-in of frame f from port in.
func checkPacketIn(t *testing.T, h *harness, f []byte, in uint64) {
	t.Helper()
	pi := nextMessage(t, h, func(m *p4v1.StreamMessageResponse) bool { return m.GetPacket() != nil }).GetPacket()
	if !bytes.Equal(pi.GetPayload(), f) {
		t.Errorf("packet-in payload %x, want %x", pi.GetPayload(), f)
	}
	if len(pi.GetMetadata()) != 1 || pi.GetMetadata()[0].GetMetadataId() != 1 || p4rt.Uint(pi.GetMetadata()[0].GetValue()) != in {
		t.Errorf("packet-in metadata %v, want ingress_port %d", pi.GetMetadata(), in)
	}
}

func tableOf(h *harness, id uint32) *p4configv1.Table {
	for _, tb := range h.n.P4Info().GetTables() {
		if tb.GetPreamble().GetId() == id {
			return tb
		}
	}
	h.t.Fatalf("no table %#x", id)
	return nil
}

func fieldWidth(tb *p4configv1.Table, id uint32) int {
	for _, mf := range tb.GetMatchFields() {
		if mf.GetId() == id {
			return int(mf.GetBitwidth())
		}
	}
	return 0
}

// programCounter is one of the program's counters with at least two cells
// (not the Go switch's own).
func programCounter(t *testing.T, h *harness) *p4configv1.Counter {
	t.Helper()
	for _, c := range h.n.P4Info().GetCounters() {
		if !strings.HasPrefix(c.GetPreamble().GetName(), "tracebed.") && c.GetSize() >= 2 {
			return c
		}
	}
	t.Skip("the program has no counter array")
	return nil
}

// defaultOf reads the default entry of table id.
func defaultOf(t *testing.T, h *harness, id uint32) *p4v1.TableEntry {
	t.Helper()
	got, err := h.read(p4rt.Table(&p4v1.TableEntry{TableId: id, IsDefaultAction: true}))
	h.must(err)
	if len(got) != 1 {
		t.Fatalf("table %#x: %d default entries", id, len(got))
	}
	return got[0].GetTableEntry()
}

// readOne reads the entry with e's key.
func readOne(t *testing.T, h *harness, e *p4v1.TableEntry) *p4v1.TableEntry {
	t.Helper()
	got, err := h.read(p4rt.Table(&p4v1.TableEntry{TableId: e.TableId, Match: e.Match, Priority: e.Priority}))
	h.must(err)
	if len(got) != 1 {
		t.Fatalf("read of one key: %d entries", len(got))
	}
	return got[0].GetTableEntry()
}

func containsKey(es []*p4v1.Entity, e *p4v1.TableEntry) bool {
	for _, x := range es {
		te := x.GetTableEntry()
		if te.GetTableId() == e.GetTableId() && te.GetPriority() == e.GetPriority() && sameMatch(te.GetMatch(), e.GetMatch()) {
			return true
		}
	}
	return false
}

// sameMatch compares matches as sets (§8.2: the order of repeated fields
// is not kept).
func sameMatch(a, b []*p4v1.FieldMatch) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		found := false
		for _, y := range b {
			found = found || proto.Equal(x, y)
		}
		if !found {
			return false
		}
	}
	return true
}

func actionParams(ta *p4v1.TableAction) []*p4v1.Action_Param {
	if a := ta.GetAction(); a != nil {
		return a.GetParams()
	}
	var out []*p4v1.Action_Param
	for _, pa := range ta.GetActionProfileActionSet().GetActionProfileActions() {
		out = append(out, pa.GetAction().GetParams()...)
	}
	return out
}
