package testbed

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/internal/testplane"
	"github.com/tracebed/tracebed/topologies"
)

// echo answers every datagram; counter counts answers.
type counter struct {
	env  emulator.Env
	to   emulator.Addr
	n    int
	recv int
}

func (c *counter) Start(env emulator.Env) {
	c.env = env
	for range c.n {
		env.Send(c.to, []byte("x"))
	}
}
func (c *counter) Recv(emulator.Addr, []byte) { c.recv++ }

func TestSimTestbed(t *testing.T) {
	top, err := topologies.Open("leafspine")
	if err != nil {
		t.Fatal(err)
	}
	prog := testplane.Program()
	tb, err := NewSim(Config{Topology: top, Program: &prog, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	var _ Testbed = tb
	var echoEnv emulator.Env
	if _, err := tb.Attach("h16", 7, emulator.AgentFunc{
		OnStart: func(env emulator.Env) { echoEnv = env },
		OnRecv:  func(from emulator.Addr, b []byte) { echoEnv.Send(from, b) },
	}); err != nil {
		t.Fatal(err)
	}
	c := &counter{to: netip.AddrPortFrom(top.Node("h16").IP, 7), n: 10}
	env, err := tb.Attach("h1", 7, c)
	if err != nil {
		t.Fatal(err)
	}
	done := func() (d bool) {
		tb.Inspect(env, func() { d = c.recv == c.n })
		return d
	}
	if err := tb.Run(context.Background(), time.Microsecond, time.Second, done); err != nil {
		t.Fatal(err)
	}
	// The switches' P4Runtime view counts what they forwarded.
	cl, err := tb.Switch("leaf1")
	if err != nil {
		t.Fatal(err)
	}
	if len(cl.P4Info().GetTables()) == 0 {
		t.Error("the switch's P4Info has no tables")
	}
	if _, err := cl.Read(context.Background(), &p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: &p4v1.TableEntry{}}}); err != nil {
		t.Errorf("wildcard table read: %v", err)
	}
	// A run waiting for the impossible stalls instead of spinning.
	err = tb.Run(context.Background(), time.Microsecond, time.Second, func() bool { return false })
	if !errors.Is(err, ErrStalled) {
		t.Errorf("got %v, want ErrStalled", err)
	}
	if _, err := tb.Switch("h1"); err == nil {
		t.Error("a host has a P4Runtime client")
	}
	if _, err := NewSim(Config{Topology: top}); err == nil || !strings.Contains(err.Error(), "Config.Program") {
		t.Errorf("switches without a program: %v", err)
	}
}
