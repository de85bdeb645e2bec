package farmem

import (
	"net/netip"
	"testing"
	"time"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/sim"
	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/topologies"
)

// lateEnv fires every timer late by a fixed amount, as a real substrate's
// timers do.
type lateEnv struct {
	emulator.Env
	late time.Duration
}

func (e lateEnv) After(d time.Duration, f func()) emulator.Timer { return e.Env.After(d+e.late, f) }

type lateBulk struct {
	*bulk
	late time.Duration
}

func (b lateBulk) Start(env emulator.Env) { b.bulk.Start(lateEnv{env, b.late}) }

// TestBulkLoad checks that a bulk sender offers its load — half its line
// rate here — and that timers firing late do not lower it: the ON/OFF
// schedule is kept in absolute times.
func TestBulkLoad(t *testing.T) {
	f, err := topologies.Generate(topologies.Params{Generate: "star", Hosts: 2, Rate: 10 * units.Gbps, Delay: units.Duration(time.Microsecond), Buffer: 64 * units.MiB})
	if err != nil {
		t.Fatal(err)
	}
	top, err := f.Build("star")
	if err != nil {
		t.Fatal(err)
	}
	const horizon = 200 * time.Millisecond
	offered := func(late time.Duration) float64 {
		s := sim.New()
		n, err := sim.NewNetwork(s, top, sim.Options{Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		k := &sink{}
		if _, err := n.Attach("h2", BulkPort, k); err != nil {
			t.Fatal(err)
		}
		b := newBulk(netip.AddrPortFrom(top.Node("h2").IP, BulkPort), 9000, 10*units.Gbps, 0.5, 50*time.Microsecond, func() bool { return false })
		if _, err := n.Attach("h1", BulkPort, lateBulk{b, late}); err != nil {
			t.Fatal(err)
		}
		s.RunUntil(sim.FromDuration(horizon))
		return float64(b.sent) * 9000 * 8 / horizon.Seconds() / 10e9
	}
	exact, late := offered(0), offered(20*time.Microsecond)
	t.Logf("offered load: %.3f with exact timers, %.3f with timers 20 µs late", exact, late)
	if exact < 0.45 || exact > 0.55 {
		t.Errorf("offered load %.3f of the line rate, want 0.5", exact)
	}
	if late < 0.98*exact {
		t.Errorf("late timers lowered the offered load from %.3f to %.3f", exact, late)
	}
}
