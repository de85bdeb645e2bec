package freeina

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tracebed/tracebed/emulator/p4rt"
	dp "github.com/tracebed/tracebed/p4/freeina"
	"github.com/tracebed/tracebed/p4/fwd"
	"github.com/tracebed/tracebed/systems/inasched"
	"github.com/tracebed/tracebed/topologies"
)

func job(id, demand, useful int) inasched.Job {
	return inasched.Job{ID: id, Workers: 4, Switch: "tor", DemandRDMA: demand, UsefulRDMA: useful, SlotRDMA: 4,
		CommRDMA: 10 * time.Millisecond, CommPSPath: 40 * time.Millisecond}
}

// TestAllReduceLevel runs a script of requests and releases against a
// switch of 64 aggregators: each line is an action and what it must give.
func TestAllReduceLevel(t *testing.T) {
	for _, tc := range []struct {
		name    string
		partial bool
		steps   []string // "begin ID → binding" or "end ID"
	}{
		{"whole windows, lowest free range first", true, []string{
			"begin 1 → rdma -1 [0,24)", "begin 2 → rdma -1 [24,48)", "end 1", "begin 3 → rdma -1 [0,24)",
			"end 2", "begin 1 → rdma -1 [24,48)"}},
		{"partial grant above the break-even size", true, []string{
			"begin 1 → rdma -1 [0,24)", "begin 2 → rdma -1 [24,48)", "begin 3 → rdma -1 [48,64)", "begin 4 → ps"}},
		{"without partial grants, the PS path", false, []string{
			"begin 1 → rdma -1 [0,24)", "begin 2 → rdma -1 [24,48)", "begin 3 → ps", "end 2", "begin 3 → rdma -1 [24,48)"}},
		{"a new all-reduce releases the job's last one", true, []string{
			"begin 1 → rdma -1 [0,24)", "begin 1 → rdma -1 [0,24)", "begin 2 → rdma -1 [24,48)"}},
		{"a gap too small between holders", true, []string{
			"begin 1 → rdma -1 [0,24)", "begin 2 → rdma -1 [24,48)", "begin 3 → rdma -1 [48,64)", "end 2", "end 3",
			"begin 4 → rdma -1 [24,48)", "begin 5 → rdma -1 [48,64)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New(inasched.Memory{"tor": 64}, tc.partial)
			for id := 1; id <= 5; id++ {
				s.Admit(0, job(id, 24, 12))
			}
			for _, st := range tc.steps {
				var id int
				if strings.HasPrefix(st, "end") {
					fmt.Sscanf(st, "end %d", &id)
					s.End(0, id)
					continue
				}
				want := st[strings.Index(st, "→ ")+len("→ "):]
				fmt.Sscanf(st, "begin %d", &id)
				if got := s.Binding(0, id).String(); got != want {
					t.Fatalf("%s: got %s", st, got)
				}
			}
		})
	}
}

// TestPSPathCases: jobs that never get memory.
func TestPSPathCases(t *testing.T) {
	s := New(inasched.Memory{"tor": 64, "spine": 64}, true)
	cross := job(1, 24, 12)
	cross.Switch, cross.Lower = "spine", []string{"tor"}
	never := job(2, 24, 25) // the INA path never beats the PS path
	single := job(3, 24, 12)
	single.Workers = 1
	for _, j := range []inasched.Job{cross, never, single} {
		s.Admit(0, j)
	}
	if b := s.Binding(0, 1); b.Mode != inasched.PS {
		t.Errorf("job across racks: %v, want the PS path", b)
	}
	if b := s.Binding(0, 2); b.Mode != inasched.PS {
		t.Errorf("job INA cannot speed up: %v, want the PS path", b)
	}
	if b := s.Binding(0, 3); b.Mode != inasched.Ring {
		t.Errorf("one worker: %v, want nothing to all-reduce", b)
	}
	if s.Held("tor")+s.Held("spine") != 0 {
		t.Error("memory held")
	}
	s.Depart(0, 1)
}

// TestPathControl: the back-off doubles on every INA all-reduce slower
// than the PS path or failed (recovered on the PS path), and resets when
// one keeps up.
func TestPathControl(t *testing.T) {
	c := DefaultControl
	if err := c.Check(); err != nil {
		t.Fatal(err)
	}
	ps := 100 * time.Millisecond
	var got []string
	run := func(took time.Duration, granted bool) {
		p := c.Choose(granted)
		got = append(got, p.String())
		switch {
		case p == PathINA && took < 0:
			c.Fail()
		case p == PathINA:
			c.Report(took, ps)
		}
	}
	run(105*time.Millisecond, true) // within the margin
	run(200*time.Millisecond, true) // slow: back off 2
	run(0, true)
	run(0, true)
	run(200*time.Millisecond, true) // slow again: back off 4
	for range 4 {
		run(0, true)
	}
	run(50*time.Millisecond, true) // keeps up: reset
	run(50*time.Millisecond, false)
	run(-1, true) // failed: back off 2
	run(0, true)
	run(0, true)
	run(-1, true) // failed again: back off 4
	for range 4 {
		run(0, true)
	}
	run(50*time.Millisecond, true)
	want := "ina ina ps ps ina ps ps ps ps ina ps ina ps ps ina ps ps ps ps ina"
	if strings.Join(got, " ") != want {
		t.Fatalf("paths %s, want %s", strings.Join(got, " "), want)
	}
	for _, bad := range []PathControl{{Margin: -1, Backoff: 1, MaxBackoff: 1}, {Margin: 2000, Backoff: 1, MaxBackoff: 1}, {Backoff: 0, MaxBackoff: 1}, {Backoff: 4, MaxBackoff: 2}} {
		if bad.Check() == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

// TestBinder writes bindings through P4Runtime to FreeINA's data plane
// and reads them back; a binding of another mode or off slot boundaries
// is refused.
func TestBinder(t *testing.T) {
	f, err := topologies.Generate(topologies.Params{Generate: "star", Hosts: 4, Aggregators: 256})
	if err != nil {
		t.Fatal(err)
	}
	top, err := f.Build("star")
	if err != nil {
		t.Fatal(err)
	}
	sw := top.Node("tor")
	pl, err := dp.New(dp.Config{Slots: dp.SlotsFor(sw.Aggregators, dp.DefaultK)}, fwd.New(sw, top.Routes()["tor"]))
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewP4RT(top, map[string]p4rt.Client{"tor": p4rt.Local(pl)})
	if err != nil {
		t.Fatal(err)
	}
	b.Chunks = func(int) uint32 { return 10 }
	ctx := context.Background()
	workers := []string{"h1", "h2", "h3"}
	job7 := inasched.Job{ID: 7, Switch: "tor"}
	if err := b.Bind(ctx, job7, inasched.Binding{Mode: inasched.RDMA, Base: 8, Size: 16}, workers); err != nil {
		t.Fatal(err)
	}
	id, ok := b.SwitchJob("tor", 7)
	if !ok {
		t.Fatal("no switch job id")
	}
	read := func() int {
		c, err := p4rt.NewNames(pl.P4Info())
		if err != nil {
			t.Fatal(err)
		}
		q, err := c.TableQuery(dp.TableJobs)
		if err != nil {
			t.Fatal(err)
		}
		ents, err := p4rt.Local(pl).Read(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	if read() != 1 {
		t.Fatal("binding not installed")
	}
	if err := b.End(ctx, job7); err != nil || read() != 0 {
		t.Fatalf("end: %v, %d bindings left", err, read())
	}
	if err := b.Bind(ctx, job7, inasched.Binding{Mode: inasched.RDMA, Base: 0, Size: 64}, workers); err != nil {
		t.Fatal(err)
	}
	if id2, _ := b.SwitchJob("tor", 7); id2 != id {
		t.Fatalf("job id changed %d → %d while its ring stayed", id, id2)
	}
	if err := b.Unbind(ctx, job7); err != nil || read() != 0 {
		t.Fatalf("unbind: %v", err)
	}
	// The ring stays, retired, until its id is needed: the same job
	// binds on it again.
	if id2, ok := b.SwitchJob("tor", 7); !ok || id2 != id {
		t.Fatalf("retired ring: id %d, %v; want %d kept", id2, ok, id)
	}
	if err := b.Bind(ctx, job7, inasched.Binding{Mode: inasched.RDMA, Base: 0, Size: 16}, workers); err != nil {
		t.Fatalf("bind on the retired ring: %v", err)
	}
	if err := b.Unbind(ctx, job7); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []inasched.Binding{{Mode: inasched.Pool, Base: 0, Size: 16}, {Mode: inasched.RDMA, Base: 2, Size: 16},
		{Mode: inasched.RDMA, Base: 0, Size: 1024}} {
		if err := b.Bind(ctx, inasched.Job{ID: 8, Switch: "tor"}, bad, workers); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	if err := b.Bind(ctx, inasched.Job{ID: 9, Switch: "tor", Lower: []string{"tor2"}}, inasched.Binding{Mode: inasched.RDMA, Size: 16}, workers); err == nil {
		t.Error("a job across racks was bound")
	}
}
