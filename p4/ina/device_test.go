package ina

import (
	"context"
	"strings"
	"testing"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tracebed/tracebed/emulator/p4rt"
)

func TestDeviceWriteErrors(t *testing.T) {
	r := newRig(t, 4, 16)
	n := r.ctl.Names()
	ok := Binding{Job: 2, ToRound: MaxRound, Mode: ModePool, Gen: 1, Base: 0, Size: 4, Workers: 2, Group: 1}
	entry := func(b Binding) *p4v1.Entity { return p4rt.Table(must(b.Entry(n))) }
	if err := r.p.Write([]*p4v1.Update{p4rt.Insert(entry(ok))}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		u    *p4v1.Update
		code codes.Code
		msg  string
	}{
		{"insert twice", p4rt.Insert(entry(ok)), codes.AlreadyExists, "exists"},
		{"modify missing", p4rt.Modify(entry(Binding{Job: 3, ToRound: MaxRound, Gen: 1, Size: 1, Workers: 1})), codes.NotFound, "no such entry"},
		{"pool outside memory", p4rt.Insert(entry(Binding{Job: 4, ToRound: MaxRound, Gen: 1, Base: 10, Size: 7, Workers: 1})), codes.InvalidArgument, "outside the switch's 16 aggregators"},
		{"generation 0", p4rt.Insert(entry(Binding{Job: 4, ToRound: MaxRound, Gen: 0, Size: 1, Workers: 1})), codes.InvalidArgument, "generation 0"},
		{"shared without PS", p4rt.Insert(entry(Binding{Job: 4, ToRound: MaxRound, Mode: ModeShared, Gen: 2, Size: 1, Workers: 1})), codes.InvalidArgument, "parameter server"},
		{"bad mode", p4rt.Insert(entry(Binding{Job: 4, ToRound: MaxRound, Mode: 7, Gen: 2, Size: 1, Workers: 1})), codes.InvalidArgument, "mode 7"},
		{"unknown table", p4rt.Insert(p4rt.Table(&p4v1.TableEntry{TableId: 99})), codes.NotFound, "no table"},
		{"register insert", p4rt.Insert(p4rt.Register(must(n.RegisterEntry(RegCount, 0, 1)))), codes.InvalidArgument, "only be modified"},
		// P4Runtime §8.3: a value wider than its field is OUT_OF_RANGE.
		{"register too wide", p4rt.Modify(p4rt.Register(&p4v1.RegisterEntry{RegisterId: must(n.RegisterID(RegCount)), Index: &p4v1.Index{Index: 0}, Data: &p4v1.P4Data{Data: &p4v1.P4Data_Bitstring{Bitstring: []byte{1, 0}}}})), codes.OutOfRange, "needs 9 bits"},
		{"register index", p4rt.Modify(p4rt.Register(&p4v1.RegisterEntry{RegisterId: must(n.RegisterID(RegCount)), Index: &p4v1.Index{Index: 32}, Data: &p4v1.P4Data{Data: &p4v1.P4Data_Bitstring{Bitstring: []byte{1}}}})), codes.OutOfRange, "outside"},
		{"group 0", p4rt.Insert(p4rt.MulticastGroup(0, nil)), codes.InvalidArgument, "group id 0"},
		{"group twice", p4rt.Insert(p4rt.MulticastGroup(9, []p4rt.Replica{{Port: 1, Instance: 1}, {Port: 1, Instance: 1}})), codes.InvalidArgument, "given twice"},
		{"meter", p4rt.Insert(&p4v1.Entity{Entity: &p4v1.Entity_MeterEntry{MeterEntry: &p4v1.MeterEntry{}}}), codes.Unimplemented, "not supported"},
		{"no entity", &p4v1.Update{Type: p4v1.Update_INSERT}, codes.InvalidArgument, "without an entity"},
		// P4Runtime §9.1.3: a MODIFY of the default entry without an action
		// resets it (allowed); the Go twin runs no other default action.
		{"default action", p4rt.Modify(p4rt.Table(&p4v1.TableEntry{TableId: must(n.TableID(TableJobs)), IsDefaultAction: true,
			Action: entry(ok).GetTableEntry().GetAction()})), codes.Unimplemented, "default action"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := r.p.Write([]*p4v1.Update{tt.u})
			if status.Code(err) != tt.code || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("error %v, want %v containing %q", err, tt.code, tt.msg)
			}
		})
	}
	// A batch attempts every update (CONTINUE_ON_ERROR, P4Runtime §12.2)
	// and reports the failed one by its index.
	b2 := ok
	b2.Job = 6
	err := r.p.Write([]*p4v1.Update{p4rt.Insert(entry(b2)), p4rt.Insert(entry(ok)), p4rt.Insert(entry(Binding{Job: 7, ToRound: MaxRound, Gen: 1, Size: 1, Workers: 1}))})
	if status.Code(err) != codes.AlreadyExists || !strings.Contains(err.Error(), "update 1") {
		t.Fatalf("batch error %v", err)
	}
	if bs, _ := r.ctl.Bindings(context.Background(), 6); len(bs) != 1 {
		t.Error("the update before the failure was not applied")
	}
	if bs, _ := r.ctl.Bindings(context.Background(), 7); len(bs) != 1 {
		t.Error("the update after the failure was not applied")
	}
}

func TestDeviceReadBack(t *testing.T) {
	r := newRig(t, 4, 16)
	ctx := context.Background()
	b := Binding{Job: 9, FromRound: 2, ToRound: MaxRound, Mode: ModeShared, Gen: 77, Base: 4, Size: 8, Workers: 3, Group: 4, PS: r.addr(5)}
	r.bind(b, 3)
	b.Epoch = b.Gen // Bind's default: a new incarnation of the job
	got, err := r.ctl.Bindings(ctx, 9)
	if err != nil || len(got) != 1 || got[0] != b {
		t.Fatalf("bindings %+v, %v; want %+v", got, err, b)
	}
	ents, err := r.ctl.Client().Read(ctx, p4rt.MulticastGroup(0, nil))
	if err != nil || len(ents) != 1 {
		t.Fatalf("groups %v, %v", ents, err)
	}
	g := ents[0].GetPacketReplicationEngineEntry().GetMulticastGroupEntry()
	if g.MulticastGroupId != 4 || len(g.Replicas) != 3 || g.Replicas[2].Instance != 3 {
		t.Errorf("group %v", g)
	}
	q := must(r.ctl.Names().TableQuery(TableReplicas))
	if ents, err := r.ctl.Client().Read(ctx, q); err != nil || len(ents) != 3 {
		t.Errorf("replica entries: %d, %v", len(ents), err)
	}
	// Exact-key reads find one entry; modify replaces its action.
	te := must(b.Entry(r.ctl.Names()))
	b.Base = 0
	te2 := must(b.Entry(r.ctl.Names()))
	if err := r.p.Write([]*p4v1.Update{p4rt.Modify(p4rt.Table(te2))}); err != nil {
		t.Fatal(err)
	}
	ents, err = r.ctl.Client().Read(ctx, p4rt.Table(te))
	if err != nil || len(ents) != 1 || !proto.Equal(ents[0].GetTableEntry(), te2) {
		t.Errorf("read by key: %v, %v", ents, err)
	}
	// Wildcard register writes reach every cell; counters read by index.
	if err := r.p.Write([]*p4v1.Update{p4rt.Modify(p4rt.Register(must(r.ctl.Names().RegisterEntry(RegGen, -1, 5))))}); err != nil {
		t.Fatal(err)
	}
	cells, err := r.ctl.ReadCells(ctx, 0, 32, 4)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cells {
		if c.Gen != 5 {
			t.Fatalf("cell %d generation %d after a wildcard write", i, c.Gen)
		}
	}
	all, err := r.ctl.Client().Read(ctx, must(r.ctl.Names().RegisterQuery(RegJobRound, -1)))
	if err != nil || len(all) != MaxJobs {
		t.Errorf("wildcard register read: %d entries, %v", len(all), err)
	}
	// Deleting the binding drops the job's packets again.
	if err := r.ctl.Unbind(ctx, 9); err != nil {
		t.Fatal(err)
	}
	if bs, _ := r.ctl.Bindings(ctx, 9); len(bs) != 0 {
		t.Errorf("bindings after unbind: %v", bs)
	}
	if err := r.ctl.DeleteGroup(ctx, 4, 3); err != nil {
		t.Fatal(err)
	}
	if ents, _ := r.ctl.Client().Read(ctx, q); len(ents) != 0 {
		t.Errorf("%d replica entries left", len(ents))
	}
}

func TestRebindProtocol(t *testing.T) {
	r := newRig(t, 2, 16)
	ctx := context.Background()
	r.bind(Binding{Job: 1, ToRound: MaxRound, Mode: ModePool, Gen: 1, Base: 0, Size: 2, Workers: 2, Group: 1}, 2)
	// Workers are in round 3; worker 0 already sent round 4.
	r.in(1, r.data(1, 0, 2, 0, 0, 3, 0, 0, []int32{1, 1}))
	r.in(2, r.data(1, 1, 2, 0, 0, 3, 0, 0, []int32{1, 1}))
	r.in(1, r.data(1, 0, 2, 1, 0, 4, 0, 0, []int32{1, 1}))
	from, err := r.ctl.Rebind(ctx, 1, Binding{Mode: ModePool, Gen: 2, Base: 8, Size: 2, Workers: 2, Group: 1}, 0)
	if err != nil || from != 5 {
		t.Fatalf("rebind from %d, %v; want 5", from, err)
	}
	bs, _ := r.ctl.Bindings(ctx, 1)
	if len(bs) != 2 || bs[0].ToRound != 4 || bs[0].Gen != 1 || bs[1].FromRound != 5 || bs[1].Gen != 2 {
		t.Fatalf("bindings after rebind %+v", bs)
	}
	// Round 4 is still in flight on the old pool: worker 1's contribution
	// completes it there.
	if out := r.in(2, r.data(1, 1, 2, 1, 0, 4, 0, 0, []int32{2, 2})); len(out) != 2 {
		t.Fatalf("round 4 on the old pool emitted %d frames", len(out))
	}
	if pending, err := r.ctl.Retire(ctx, 1); err != nil || !pending {
		t.Fatalf("retired before the job drained: %v %v", pending, err)
	}
	r.in(1, r.data(1, 0, 2, 0, 1, 5, 0, 0, []int32{1, 1}))
	if ok, _ := r.ctl.Drained(ctx, 1, AllWorkers(2), 5); ok {
		t.Fatal("drained with one worker in round 5")
	}
	r.in(2, r.data(1, 1, 2, 0, 1, 5, 0, 0, []int32{1, 1}))
	if pending, err := r.ctl.Retire(ctx, 1); err != nil || pending {
		t.Fatalf("retire after the drain: %v %v", pending, err)
	}
	if bs, _ := r.ctl.Bindings(ctx, 1); len(bs) != 1 || bs[0].Gen != 2 {
		t.Fatalf("bindings after retire %+v", bs)
	}
	cells, _ := r.ctl.ReadCells(ctx, 17, 1, 2)
	if cells[0].Count != 2 || cells[0].Round != 5 {
		t.Errorf("round 5 not aggregated in the new pool: %+v", cells[0])
	}
	// A late packet of round 4 now finds no binding: counted, harmless.
	before := r.p.drops[DropNoJob].pk
	r.in(2, r.data(1, 1, 2, 1, 0, 4, 0, FlagRetransmit, []int32{2, 2}))
	if r.p.drops[DropNoJob].pk != before+1 {
		t.Error("late packet of a retired binding was not dropped as no_job")
	}
}

// TestProgressAcrossEpochs: Progress reads the job's progress from the
// parity counters, in step with the registers; a job id bound again (a
// new epoch) starts afresh with its first packet, and reads zero until
// then, with no register written by the controller.
func TestProgressAcrossEpochs(t *testing.T) {
	r := newRig(t, 2, 16)
	ctx := context.Background()
	check := func(what string, round, workers uint32) {
		t.Helper()
		gr, gw, err := r.ctl.Progress(ctx, 1)
		if err != nil || gr != round || gw != workers {
			t.Fatalf("%s: progress %d %#b, %v; want %d %#b", what, gr, gw, err, round, workers)
		}
		if pr, pw := r.p.jobRound[1], r.p.jobWorkers[1]; r.p.jobEpoch[1] == r.p.jobs[1][0].epoch && (pr != gr || pw != gw) {
			t.Fatalf("%s: registers %d %#b, counters %d %#b", what, pr, pw, gr, gw)
		}
	}
	r.bind(Binding{Job: 1, ToRound: MaxRound, Mode: ModePool, Gen: 5, Size: 2, Workers: 2, Group: 1}, 2)
	check("bound", 0, 0)
	r.in(1, r.data(1, 0, 2, 0, 0, 0, 0, 0, []int32{1, 1}))
	check("round 0 from worker 0", 0, 0b01)
	r.in(2, r.data(1, 1, 2, 0, 0, 7, 0, 0, []int32{1, 1}))
	check("round 7 from worker 1", 7, 0b10)
	r.in(1, r.data(1, 0, 2, 1, 0, 7, 0, 0, []int32{1, 1}))
	check("round 7 from both", 7, 0b11)
	if err := r.ctl.Unbind(ctx, 1); err != nil {
		t.Fatal(err)
	}
	r.bind(Binding{Job: 1, ToRound: MaxRound, Mode: ModePool, Gen: 6, Size: 2, Workers: 2, Group: 1}, 2)
	check("bound again", 0, 0)
	r.in(2, r.data(1, 1, 2, 0, 0, 2, 0, 0, []int32{1, 1}))
	check("round 2 of the new incarnation", 2, 0b10)
}

// TestParseBindingRefuses: an entry read back from a switch whose values
// do not fit the binding is refused, naming what is wrong, rather than
// decoded into a different binding.
func TestParseBindingRefuses(t *testing.T) {
	r := newRig(t, 4, 16)
	n := r.ctl.Names()
	b := Binding{Job: 2, ToRound: MaxRound, Mode: ModeShared, Gen: 2, Base: 4, Size: 4, Workers: 2, Group: 2, PS: r.addr(5)}
	workers := must(n.ParamID(ActionBind, ParamWorkers))
	psAddr := must(n.ParamID(ActionBind, ParamPSAddr))
	for _, tc := range []struct {
		name   string
		change func(*p4v1.TableEntry)
		want   string
	}{
		{"workers wider than 8 bits", func(te *p4v1.TableEntry) {
			for _, p := range te.GetAction().GetAction().GetParams() {
				if p.GetParamId() == workers {
					p.Value = []byte{1, 2} // 258 workers: was read as 2
				}
			}
		}, `param "workers"`},
		{"a parameter server's port without its address", func(te *p4v1.TableEntry) {
			for _, p := range te.GetAction().GetAction().GetParams() {
				if p.GetParamId() == psAddr {
					p.Value = []byte{0}
				}
			}
		}, "without a " + ParamPSAddr},
		{"unknown parameter", func(te *p4v1.TableEntry) {
			a := te.GetAction().GetAction()
			a.Params = append(a.Params, &p4v1.Action_Param{ParamId: 99, Value: []byte{1}})
		}, "param id 99"},
	} {
		te := must(b.Entry(n))
		tc.change(te)
		if _, err := ParseBinding(n, te); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %s", tc.name, err, tc.want)
		}
	}
	if got, err := ParseBinding(n, must(b.Entry(n))); err != nil || got != b {
		t.Errorf("round trip: %+v, %v", got, err)
	}
}
