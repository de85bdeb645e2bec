package inasched_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"

	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/p4/fwd"
	"github.com/tracebed/tracebed/p4/ina"
	"github.com/tracebed/tracebed/systems/inasched"
	"github.com/tracebed/tracebed/topologies"
)

// scripted is a scheduler whose bindings a test sets.
type scripted struct{ b map[int]inasched.Binding }

func (s *scripted) Name() string                      { return "scripted" }
func (s *scripted) Admit(time.Duration, inasched.Job) {}
func (s *scripted) Depart(_ time.Duration, id int)    { delete(s.b, id) }
func (s *scripted) Binding(_ time.Duration, id int) inasched.Binding {
	if b, ok := s.b[id]; ok {
		return b
	}
	return inasched.RingBinding
}
func (s *scripted) Priority(int) float64 { return 0 }

func setup(t *testing.T) (*topologies.Topology, *ina.Pipeline, *inasched.P4RT) {
	t.Helper()
	f, err := topologies.Generate(topologies.Params{Generate: "star", Hosts: 6, Aggregators: 256})
	if err != nil {
		t.Fatal(err)
	}
	top, err := f.Build("t")
	if err != nil {
		t.Fatal(err)
	}
	sw := top.Node("tor")
	pl, err := ina.New(ina.Config{K: ina.DefaultK, Aggregators: sw.Aggregators}, fwd.New(sw, top.Routes()["tor"]))
	if err != nil {
		t.Fatal(err)
	}
	b, err := inasched.NewP4RT(top, map[string]p4rt.Client{"tor": p4rt.Local(pl)})
	if err != nil {
		t.Fatal(err)
	}
	return top, pl, b
}

// TestControllerWritesThroughP4Runtime drives the controller loop over the
// INA device: admit, bind, move, fall back to the ring, leave — and reads
// the job table back after each step.
func TestControllerWritesThroughP4Runtime(t *testing.T) {
	_, _, binder := setup(t)
	ctx := context.Background()
	s := &scripted{b: map[int]inasched.Binding{}}
	c := inasched.NewController(s, binder)
	job := inasched.Job{ID: 77, Workers: 3, Switch: "tor"}
	c.Admit(0, job, []string{"h1", "h2", "h3"})
	tables := func() []ina.Binding {
		id, ok := binder.SwitchJob("tor", 77)
		if !ok {
			return nil
		}
		bs, err := binder.Controller("tor").Bindings(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return bs
	}
	// Ring: nothing written.
	if b, err := c.Begin(0, 77); err != nil || b.INA() || len(tables()) != 0 || c.Writes() != 0 {
		t.Fatalf("ring: %v %v, entries %v, writes %d", b, err, tables(), c.Writes())
	}
	// Bind to a pool.
	s.b[77] = inasched.Binding{Mode: inasched.Pool, Pool: 1, Base: 16, Size: 32}
	if _, err := c.Begin(time.Millisecond, 77); err != nil {
		t.Fatal(err)
	}
	bs := tables()
	if len(bs) != 1 || bs[0].Base != 16 || bs[0].Size != 32 || bs[0].Mode != ina.ModePool || bs[0].Workers != 3 || bs[0].ToRound != ina.MaxRound {
		t.Fatalf("after bind: %+v", bs)
	}
	// Same binding: no write.
	w := c.Writes()
	if _, err := c.Begin(2*time.Millisecond, 77); err != nil || c.Writes() != w {
		t.Fatalf("unchanged binding rewritten (%v)", err)
	}
	// Move the pool, then share.
	s.b[77] = inasched.Binding{Mode: inasched.Pool, Pool: 2, Base: 100, Size: 64}
	if _, err := c.Begin(3*time.Millisecond, 77); err != nil {
		t.Fatal(err)
	}
	if bs := tables(); len(bs) != 1 || bs[0].Base != 100 || bs[0].Size != 64 {
		t.Fatalf("after move: %+v", bs)
	}
	s.b[77] = inasched.Binding{Mode: inasched.Shared, Base: 0, Size: 256}
	if _, err := c.Begin(4*time.Millisecond, 77); err != nil {
		t.Fatal(err)
	}
	if bs := tables(); len(bs) != 1 || bs[0].Mode != ina.ModeShared || !bs[0].PS.IsValid() {
		t.Fatalf("after share: %+v", bs)
	}
	// Out of memory: back to the ring, the entry goes.
	delete(s.b, 77)
	if _, err := c.Begin(5*time.Millisecond, 77); err != nil {
		t.Fatal(err)
	}
	if bs := tables(); len(bs) != 0 {
		t.Fatalf("ring after INA: entries %+v", bs)
	}
	// Bind again and leave.
	s.b[77] = inasched.Binding{Mode: inasched.Pool, Base: 0, Size: 8}
	if _, err := c.Begin(6*time.Millisecond, 77); err != nil {
		t.Fatal(err)
	}
	if err := c.Depart(7*time.Millisecond, 77); err != nil {
		t.Fatal(err)
	}
	if _, ok := binder.SwitchJob("tor", 77); ok {
		t.Error("switch job id kept after departure")
	}
	if err := c.Depart(8*time.Millisecond, 77); err == nil {
		t.Error("second departure accepted")
	}
	if _, err := c.Begin(0, 5); err == nil {
		t.Error("binding of a job never admitted")
	}
}

// TestP4RTRejects: the data plane checks what the controller writes.
func TestP4RTRejects(t *testing.T) {
	_, _, binder := setup(t)
	ctx := context.Background()
	if err := binder.Bind(ctx, inasched.Job{ID: 1, Switch: "tor"}, inasched.Binding{Mode: inasched.Pool, Base: 200, Size: 100}, []string{"h1", "h2"}); err == nil {
		t.Error("pool beyond the switch's 256 aggregators accepted")
	}
	if err := binder.Bind(ctx, inasched.Job{ID: 1, Switch: "nosuch"}, inasched.Binding{Mode: inasched.Pool, Base: 0, Size: 10}, []string{"h1", "h2"}); err == nil {
		t.Error("unknown switch accepted")
	}
	if err := binder.Bind(ctx, inasched.Job{ID: 1, Switch: "tor"}, inasched.Binding{Mode: inasched.Pool, Base: 0, Size: 10}, []string{"h1", "tor"}); err == nil {
		t.Error("a switch as a worker accepted")
	}
	many := make([]string, ina.MaxWorkers+1)
	for i := range many {
		many[i] = "h1"
	}
	if err := binder.Bind(ctx, inasched.Job{ID: 1, Switch: "tor"}, inasched.Binding{Mode: inasched.Pool, Base: 0, Size: 10}, many); err == nil {
		t.Error("too many workers accepted")
	}
}

// TestSwitchJobIDsRecycled: trace job ids are mapped onto the switch's
// ina.MaxJobs job ids, which come back when jobs leave.
func TestSwitchJobIDsRecycled(t *testing.T) {
	_, _, binder := setup(t)
	ctx := context.Background()
	bind := func(id int) error {
		return binder.Bind(ctx, inasched.Job{ID: id, Switch: "tor"}, inasched.Binding{Mode: inasched.Pool, Base: id % 256, Size: 1}, []string{"h1", "h2"})
	}
	for j := range ina.MaxJobs {
		if err := bind(5000 + j); err != nil {
			t.Fatalf("job %d: %v", j, err)
		}
	}
	if err := bind(1); err == nil {
		t.Fatal("more jobs than switch ids accepted")
	}
	for _, j := range []int{5003, 5500, 6000} {
		if err := binder.Unbind(ctx, inasched.Job{ID: j, Switch: "tor"}); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[uint16]bool{}
	for _, j := range []int{1, 2, 3} {
		if err := bind(j); err != nil {
			t.Fatalf("job %d after ids were freed: %v", j, err)
		}
		id, _ := binder.SwitchJob("tor", j)
		seen[id] = true
	}
	if !seen[3] || !seen[500] || !seen[1000] {
		t.Errorf("new jobs got switch ids %v; want the freed 3, 500, 1000", seen)
	}
}

func TestBindingOverlaps(t *testing.T) {
	a := inasched.Binding{Mode: inasched.Pool, Base: 0, Size: 10}
	for _, tt := range []struct {
		b    inasched.Binding
		want bool
	}{
		{inasched.Binding{Mode: inasched.Pool, Base: 9, Size: 1}, true},
		{inasched.Binding{Mode: inasched.Pool, Base: 10, Size: 5}, false},
		{inasched.Binding{Mode: inasched.Shared, Base: 0, Size: 100}, true},
		{inasched.RingBinding, false},
	} {
		if got := a.Overlaps(tt.b); got != tt.want {
			t.Errorf("%v overlaps %v = %v", a, tt.b, got)
		}
	}
	j := inasched.Job{Compute: 90 * time.Millisecond, CommINA: 10 * time.Millisecond, Gradient: 9e6}
	if j.Period() != 100*time.Millisecond || math.Abs(j.CommFraction()-0.1) > 1e-12 || j.Intensity() != 1e8 {
		t.Errorf("period %v fraction %v intensity %v", j.Period(), j.CommFraction(), j.Intensity())
	}
}

// TestRetireAfterMove: a moved job keeps its old binding for the rounds
// before the move until the switch has seen every worker in the new one;
// Retire then deletes it.
func TestRetireAfterMove(t *testing.T) {
	_, pl, binder := setup(t)
	ctx := context.Background()
	workers := []string{"h1", "h2"}
	if err := binder.Bind(ctx, inasched.Job{ID: 9, Switch: "tor"}, inasched.Binding{Mode: inasched.Pool, Base: 0, Size: 8}, workers); err != nil {
		t.Fatal(err)
	}
	if pending, err := binder.Retire(ctx, inasched.Job{ID: 9, Switch: "tor"}); err != nil || pending {
		t.Fatalf("nothing to retire before a move: pending %v, %v", pending, err)
	}
	id, _ := binder.SwitchJob("tor", 9)
	ctl := binder.Controller("tor")
	// The switch has seen round 4 from both workers; the move takes effect
	// from round 5.
	names := ctl.Names()
	bs, err := ctl.Bindings(ctx, id)
	if err != nil || len(bs) != 1 {
		t.Fatalf("bindings %v, %v", bs, err)
	}
	for reg, v := range map[string]uint64{ina.RegJobRound: 4, ina.RegJobWorkers: 3, ina.RegJobEpoch: uint64(bs[0].Epoch)} {
		re, err := names.RegisterEntry(reg, int64(id), v)
		if err != nil {
			t.Fatal(err)
		}
		if err := pl.Write([]*p4v1.Update{p4rt.Modify(p4rt.Register(re))}); err != nil {
			t.Fatal(err)
		}
	}
	if err := binder.Bind(ctx, inasched.Job{ID: 9, Switch: "tor"}, inasched.Binding{Mode: inasched.Pool, Base: 8, Size: 8}, workers); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		bs, err := ctl.Bindings(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return len(bs)
	}
	if n := count(); n != 2 {
		t.Fatalf("%d bindings after the move, want the old (rounds ≤ 4) and the new", n)
	}
	if pending, err := binder.Retire(ctx, inasched.Job{ID: 9, Switch: "tor"}); err != nil || !pending || count() != 2 {
		t.Fatalf("retired before the workers entered round 5: pending %v, %v, %d bindings", pending, err, count())
	}
	re, _ := names.RegisterEntry(ina.RegJobRound, int64(id), 5)
	if err := pl.Write([]*p4v1.Update{p4rt.Modify(p4rt.Register(re))}); err != nil {
		t.Fatal(err)
	}
	if pending, err := binder.Retire(ctx, inasched.Job{ID: 9, Switch: "tor"}); err != nil || pending || count() != 1 {
		t.Fatalf("after round 5 began everywhere: pending %v, %v, %d bindings", pending, err, count())
	}
	if pending, err := binder.Retire(ctx, inasched.Job{ID: 9, Switch: "tor"}); err != nil || pending {
		t.Fatalf("a second retire: pending %v, %v", pending, err)
	}
}

// TestControllerDeferredCalls: with an Exec that holds the calls (as an
// agent's port does until its substrate runs them), the controller's
// decisions and the binder's bookkeeping take effect at once, the switch
// changes only when the calls run, in the order they were made, and an
// error of a call names the job.
func TestControllerDeferredCalls(t *testing.T) {
	_, _, binder := setup(t)
	ctx := context.Background()
	s := &scripted{b: map[int]inasched.Binding{}}
	c := inasched.NewController(s, binder)
	var held []inasched.Call
	c.SetExec(func(call inasched.Call) error { held = append(held, call); return nil })
	job := inasched.Job{ID: 5, Workers: 2, Switch: "tor"}
	c.Admit(0, job, []string{"h1", "h2"})
	s.b[5] = inasched.Binding{Mode: inasched.Pool, Pool: 1, Base: 0, Size: 16}
	b, err := c.Begin(0, 5)
	id, bound := binder.SwitchJob("tor", 5)
	if err != nil || !b.INA() || !bound || len(held) != 1 || c.Writes() != 1 {
		t.Fatalf("begin: %v %v, switch job %d %v, %d calls held, %d writes", b, err, id, bound, len(held), c.Writes())
	}
	entries := func() int {
		bs, err := binder.Controller("tor").Bindings(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return len(bs)
	}
	if n := entries(); n != 0 {
		t.Fatalf("the switch holds %d bindings before the call ran", n)
	}
	if err := c.Depart(0, 5); err != nil || len(held) != 2 {
		t.Fatalf("depart: %v, %d calls held", err, len(held))
	}
	if _, bound := binder.SwitchJob("tor", 5); bound {
		t.Error("the job still has a switch job id after its release was planned")
	}
	if err := held[0](ctx); err != nil || entries() != 1 {
		t.Fatalf("the binding's call: %v, %d bindings", err, entries())
	}
	if err := held[1](ctx); err != nil || entries() != 0 {
		t.Fatalf("the release's call: %v, %d bindings", err, entries())
	}
	// A call that fails (its entry is gone) names the job and its switch.
	c.Admit(0, job, []string{"h1", "h2"})
	s.b[5] = inasched.Binding{Mode: inasched.Pool, Pool: 1, Base: 0, Size: 16}
	held = nil
	if _, err := c.Begin(0, 5); err != nil || len(held) != 1 {
		t.Fatalf("bind again: %v, %d calls", err, len(held))
	}
	if err := held[0](ctx); err != nil {
		t.Fatal(err)
	}
	id, _ = binder.SwitchJob("tor", 5)
	if err := binder.Controller("tor").Unbind(ctx, id); err != nil {
		t.Fatal(err)
	}
	s.b[5] = inasched.Binding{Mode: inasched.Pool, Pool: 1, Base: 32, Size: 16} // a move: Rebind reads the binding back
	if _, err := c.Begin(0, 5); err != nil || len(held) != 2 {
		t.Fatalf("move: %v, %d calls", err, len(held))
	}
	if err := held[1](ctx); err == nil || !strings.Contains(err.Error(), "job 5 on [tor]") {
		t.Errorf("a failed call: %v, want it to name job 5 on [tor]", err)
	}
}

// TestRetireCallAfterAnotherMove: a retirement's answer is not recorded
// when another move of the job was planned while it was on its way, so
// the next boundary asks again and retires what that move left.
func TestRetireCallAfterAnotherMove(t *testing.T) {
	_, pl, binder := setup(t)
	ctx := context.Background()
	workers := []string{"h1", "h2"}
	job := inasched.Job{ID: 9, Switch: "tor"}
	if err := binder.Bind(ctx, job, inasched.Binding{Mode: inasched.Pool, Base: 0, Size: 8}, workers); err != nil {
		t.Fatal(err)
	}
	id, _ := binder.SwitchJob("tor", 9)
	ctl := binder.Controller("tor")
	setRound := func(round, workers uint64) {
		bs, err := ctl.Bindings(ctx, id)
		if err != nil || len(bs) == 0 {
			t.Fatalf("bindings %v, %v", bs, err)
		}
		for reg, v := range map[string]uint64{ina.RegJobRound: round, ina.RegJobWorkers: workers, ina.RegJobEpoch: uint64(bs[0].Epoch)} {
			re, err := ctl.Names().RegisterEntry(reg, int64(id), v)
			if err != nil {
				t.Fatal(err)
			}
			if err := pl.Write([]*p4v1.Update{p4rt.Modify(p4rt.Register(re))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	count := func() int {
		bs, err := ctl.Bindings(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return len(bs)
	}
	setRound(4, 3)
	if err := binder.Bind(ctx, job, inasched.Binding{Mode: inasched.Pool, Base: 8, Size: 8}, workers); err != nil {
		t.Fatal(err)
	}
	setRound(5, 3) // both workers in round 5: the move from round 5 has drained
	call, commit, err := binder.RetireCall(job)
	if err != nil || call == nil {
		t.Fatalf("retire: %v, call %v", err, call != nil)
	}
	// Another move is planned before the retirement's answer comes back.
	move, err := binder.BindCall(job, inasched.Binding{Mode: inasched.Pool, Base: 16, Size: 8}, workers)
	if err != nil {
		t.Fatal(err)
	}
	if err := call(ctx); err != nil {
		t.Fatal(err)
	}
	if pending := commit(); pending || count() != 1 {
		t.Fatalf("the first retirement: pending %v, %d bindings", pending, count())
	}
	if err := move(ctx); err != nil || count() != 2 {
		t.Fatalf("the second move: %v, %d bindings", err, count())
	}
	setRound(7, 3)
	call, commit, err = binder.RetireCall(job)
	if err != nil || call == nil {
		t.Fatalf("the boundary after the second move asks nothing: %v", err)
	}
	if err := call(ctx); err != nil || commit() || count() != 1 {
		t.Fatalf("the second retirement: %v, %d bindings", err, count())
	}
	if call, _, _ := binder.RetireCall(job); call != nil {
		t.Error("a retirement with nothing left asks the switch again")
	}
}
