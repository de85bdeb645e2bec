//go:build linux && !nonetns

package programs_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/netns"
	"github.com/tracebed/tracebed/emulator/testbed"
	"github.com/tracebed/tracebed/emulator/testbed/netnstb"
	"github.com/tracebed/tracebed/p4/fwd"
	"github.com/tracebed/tracebed/topologies"
)

// prefix starts the run ids of this test binary (see netns.TestRunID).
var prefix = "p" + netns.NewRunID()[:2]

// TestMain checks after the suite that nothing of its runs is left.
func TestMain(m *testing.M) { os.Exit(netns.RunTests(m, prefix)) }

// TestBMv2Testbed: datagrams echoed across a leaf-spine of
// simple_switch_grpc running fwd.p4 in the netns testbed, programmed over
// P4Runtime (where bmv2 and p4c are installed).
func TestBMv2Testbed(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: the netns testbed needs root (network namespaces); CI runs as root")
	}
	if err := netnstb.Check(netnstb.Options{Switch: netnstb.SwitchBMv2}); err != nil {
		t.Skipf("skipping: %v", err)
	}
	top, err := topologies.Open("leafspine")
	if err != nil {
		t.Fatal(err)
	}
	id := netns.TestRunID(prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prog := fwd.SwitchProgram()
	tb, err := netnstb.New(ctx, testbed.Config{Topology: top, Program: &prog}, netnstb.Options{RunID: id, Switch: netnstb.SwitchBMv2, MTU: 1500})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	var echoEnv emulator.Env
	srv, err := tb.Attach("h16", 7, emulator.AgentFunc{
		OnStart: func(env emulator.Env) { echoEnv = env },
		OnRecv:  func(from emulator.Addr, b []byte) { echoEnv.Send(from, b) },
	})
	if err != nil {
		t.Fatal(err)
	}
	// The client sends n datagrams, one per millisecond, and every 100 ms
	// sends again those not answered yet: the switches are user-space
	// processes, and on a loaded machine (make test runs packages side by
	// side) a burst can overflow a socket buffer on the way, as on a real
	// network; what must hold is that every datagram crosses the fabric.
	const n = 100
	got := map[byte]bool{}
	var resends int
	var resend func(env emulator.Env)
	resend = func(env emulator.Env) {
		for i := range n {
			if !got[byte(i)] {
				env.Send(srv.Local(), []byte{byte(i)})
				resends++
			}
		}
		if len(got) < n {
			env.After(100*time.Millisecond, func() { resend(env) })
		}
	}
	env, err := tb.Attach("h1", 7, emulator.AgentFunc{
		OnStart: func(env emulator.Env) {
			for i := range n {
				env.After(time.Duration(i)*time.Millisecond, func() { env.Send(srv.Local(), []byte{byte(i)}) })
			}
			env.After(time.Duration(n)*time.Millisecond+100*time.Millisecond, func() { resend(env) })
		},
		OnRecv: func(_ emulator.Addr, b []byte) { got[b[0]] = true },
	})
	if err != nil {
		t.Fatal(err)
	}
	done := func() (fin bool) {
		tb.Inspect(env, func() { fin = len(got) == n })
		return fin
	}
	if err := tb.Run(ctx, 20*time.Millisecond, time.Minute, done); err != nil {
		var answered int
		tb.Inspect(env, func() { answered = len(got) })
		t.Fatalf("%d of %d answered through bmv2: %v", answered, n, err)
	}
	var again int
	tb.Inspect(env, func() { again = resends })
	t.Logf("%d datagrams answered through bmv2, %d sent again", n, again)
	if err := tb.Close(); err != nil {
		t.Fatal(err)
	}
	if err := netns.CheckClean(id); err != nil {
		t.Fatal(err)
	}
}
