package inasched_test

import (
	"context"
	"testing"

	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/p4/fwd"
	"github.com/tracebed/tracebed/p4/ina"
	"github.com/tracebed/tracebed/systems/inasched"
	"github.com/tracebed/tracebed/topologies"
)

// TestP4RTTwoLevel binds a job across racks on a leaf-spine: every switch
// of its tree gets one switch job id, the racks' ToRs complete their
// workers and point up at the spine, the spine completes them all and
// multicasts to the ToRs; a move rebinds every switch; unbinding clears
// every one.
func TestP4RTTwoLevel(t *testing.T) {
	f, err := topologies.Generate(topologies.Params{Generate: "leafspine", Spines: 2, Leaves: 2, HostsPerLeaf: 3, Aggregators: 64})
	if err != nil {
		t.Fatal(err)
	}
	top, err := f.Build("ls")
	if err != nil {
		t.Fatal(err)
	}
	routes := top.Routes()
	clients := map[string]p4rt.Client{}
	for _, sw := range top.Switches() {
		pl, err := ina.New(ina.Config{Aggregators: sw.Aggregators}, fwd.New(sw, routes[sw.Name]))
		if err != nil {
			t.Fatal(err)
		}
		clients[sw.Name] = p4rt.Local(pl)
	}
	b, err := inasched.NewP4RT(top, clients)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// A rack-local job on leaf2 takes its first id, so the job across
	// racks must find one free on all three switches.
	if err := b.Bind(ctx, inasched.Job{ID: 7, Switch: "leaf2"}, inasched.Binding{Mode: inasched.Pool, Base: 0, Size: 4}, []string{"h4", "h5"}); err != nil {
		t.Fatal(err)
	}
	j := inasched.Job{ID: 9, Switch: "spine1", Lower: []string{"leaf1", "leaf2"}, Workers: 3}
	workers := []string{"h1", "h4", "h2"} // worker 0 and 2 under leaf1, 1 under leaf2
	if err := b.Bind(ctx, j, inasched.Binding{Mode: inasched.Pool, Base: 8, Size: 4}, workers); err != nil {
		t.Fatal(err)
	}
	id, ok := b.SwitchJob("spine1", 9)
	if !ok || id == 0 {
		t.Fatalf("switch job id %d (bound %v): want one free on every switch of the tree, not leaf2's 0", id, ok)
	}
	want := map[string]struct {
		members uint32
		up      string
	}{"spine1": {0, ""}, "leaf1": {0b101, "spine1"}, "leaf2": {0b010, "spine1"}}
	for sw, w := range want {
		if got, _ := b.SwitchJob(sw, 9); got != id {
			t.Errorf("%s: switch job id %d, want %d on every switch", sw, got, id)
		}
		bs, err := b.Controller(sw).Bindings(ctx, id)
		if err != nil || len(bs) != 1 {
			t.Fatalf("%s: bindings %v, %v", sw, bs, err)
		}
		up := ""
		if bs[0].Up.IsValid() {
			up = top.NodeByIP(bs[0].Up).Name
		}
		if bs[0].Members != w.members || up != w.up || bs[0].Base != 8 || bs[0].Size != 4 || bs[0].Workers != 3 {
			t.Errorf("%s: binding %+v, want members %#b, up %q, pool [8,12) of 3 workers", sw, bs[0], w.members, w.up)
		}
	}
	// A move: every switch of the tree is rebound.
	if err := b.Bind(ctx, j, inasched.Binding{Mode: inasched.Pool, Base: 20, Size: 4}, workers); err != nil {
		t.Fatal(err)
	}
	for sw := range want {
		if bs, _ := b.Controller(sw).Bindings(ctx, id); len(bs) != 1 || bs[0].Base != 20 {
			t.Errorf("%s after the move: %+v", sw, bs)
		}
	}
	if _, err := b.Retire(ctx, j); err != nil {
		t.Fatal(err)
	}
	if err := b.Unbind(ctx, j); err != nil {
		t.Fatal(err)
	}
	for sw := range want {
		if _, ok := b.SwitchJob(sw, 9); ok {
			t.Errorf("%s: job still bound", sw)
		}
		if bs, _ := b.Controller(sw).Bindings(ctx, id); len(bs) != 0 {
			t.Errorf("%s: bindings %+v left", sw, bs)
		}
	}
	// A worker under none of the lower switches is refused.
	if err := b.Bind(ctx, inasched.Job{ID: 10, Switch: "spine1", Lower: []string{"leaf1"}}, inasched.Binding{Mode: inasched.Pool, Base: 0, Size: 4}, []string{"h1", "h4"}); err == nil {
		t.Error("a tree whose lower switches miss a worker accepted")
	}
}
