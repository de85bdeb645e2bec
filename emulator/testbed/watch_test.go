package testbed

import (
	"context"
	"strings"
	"testing"
	"time"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/internal/testplane"
	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/topologies"
)

// TestWatch: on a watched sim testbed, a P4Runtime read made inside an
// agent's callback is reported with the agent's address, the same read
// made through the agent's port is not, and it completes the testbed's
// control latency after it was made.
func TestWatch(t *testing.T) {
	top, err := topologies.Open("leafspine")
	if err != nil {
		t.Fatal(err)
	}
	prog := testplane.Program()
	const latency = 70 * time.Microsecond
	if _, err := NewSim(Config{Topology: top, Program: &prog, ControlLatency: -1}); err == nil {
		t.Error("a negative control latency accepted")
	}
	sim, err := NewSim(Config{Topology: top, Program: &prog, Seed: 1, ControlLatency: latency})
	if err != nil {
		t.Fatal(err)
	}
	tb := Watch(sim, 0)
	client, err := tb.Switch("leaf1")
	if err != nil {
		t.Fatal(err)
	}
	query := &p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: &p4v1.TableEntry{}}}
	var blocking, evented emulator.Env
	var readAt time.Duration = -1
	var readErr error
	if _, err := tb.Attach("h1", 9, emulator.AgentFunc{OnStart: func(env emulator.Env) {
		blocking = env
		env.After(time.Microsecond, func() { client.Read(context.Background(), query) })
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Attach("h2", 9, emulator.AgentFunc{OnStart: func(env emulator.Env) {
		evented = env
		port, err := p4rt.NewPort(env)
		if err != nil {
			t.Error(err)
			return
		}
		port.Read(client, []*p4v1.Entity{query}, func(_ []*p4v1.Entity, err error) { readAt, readErr = env.Now(), err })
	}}); err != nil {
		t.Fatal(err)
	}
	if err := tb.Run(context.Background(), time.Microsecond, time.Millisecond, func() bool { return readAt >= 0 }); err != nil {
		t.Fatal(err)
	}
	if err := tb.Run(context.Background(), time.Microsecond, time.Millisecond, func() bool { return tb.Report().Calls == 2 }); err != nil {
		t.Fatal(err)
	}
	if readAt != latency || readErr != nil {
		t.Errorf("the port's read completed at %v (%v), want %v", readAt, readErr, latency)
	}
	r := tb.Report()
	if len(r.Inside) != 1 || !strings.Contains(r.Inside[0], blocking.Local().String()) || strings.Contains(r.Inside[0], evented.Local().String()) {
		t.Errorf("reads inside callbacks: %q; want the one of %v", r.Inside, blocking.Local())
	}
	if r.Timers != 1 || r.MaxLateness != 0 {
		t.Errorf("%d timers, the latest %v late; want 1, on time (sim)", r.Timers, r.MaxLateness)
	}
}
