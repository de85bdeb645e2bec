package farmem

import (
	"math"
	"net/netip"
	"testing"
	"time"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/sim"
	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/p4/fwd"
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
	top := bulkStar(t, 2)
	const horizon = 200 * time.Millisecond
	offered := func(late time.Duration) float64 {
		s := sim.New()
		n, err := sim.NewNetwork(s, top, sim.Options{Seed: 1, Pipeline: fwd.SimPipeline})
		if err != nil {
			t.Fatal(err)
		}
		k := &sink{}
		if _, err := n.Attach("h2", BulkPort, k); err != nil {
			t.Fatal(err)
		}
		b := newBulk([]emulator.Addr{netip.AddrPortFrom(top.Node("h2").IP, BulkPort)}, []float64{1}, 9000, 10*units.Gbps, 0.5, 50*time.Microsecond, func() bool { return false })
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

func TestSpreadBulk(t *testing.T) {
	const R = 100e9
	tests := []struct {
		name             string
		load             float64
		servers, senders []float64
		wantErr          bool
	}{
		{"one sender, two servers", 0.5, []float64{R, R}, []float64{R}, false},
		{"one sender, three servers", 0.3, []float64{R, R, R}, []float64{R}, false},
		{"two senders, three servers", 0.5, []float64{R, R, R}, []float64{R, R}, false},
		{"four senders, two servers", 0.75, []float64{R, R}, []float64{R, R, R, R}, false},
		{"three senders, two servers", 0.6, []float64{R, R}, []float64{R, R, R}, false},
		{"slow server link", 0.5, []float64{R, R / 4}, []float64{R}, false},
		{"too much for one sender", 0.6, []float64{R, R}, []float64{R}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := spreadBulk(tt.load, tt.servers, tt.senders)
			if tt.wantErr {
				if err == nil {
					t.Fatal("no error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := make([]float64, len(tt.servers))
			for i, w := range p.weights {
				if p.share[i] > 1 || p.share[i] <= 0 {
					t.Errorf("sender %d on %.3f of the time", i, p.share[i])
				}
				var sum float64
				for s, x := range w {
					got[s] += p.share[i] * tt.senders[i] * x
					sum += x
				}
				if math.Abs(sum-1) > 1e-9 {
					t.Errorf("sender %d: weights %v sum to %v", i, w, sum)
				}
			}
			for s, g := range got {
				if want := tt.load * tt.servers[s]; math.Abs(g-want) > 1e-6*want {
					t.Errorf("server %d offered %.4g bit/s, want %.4g", s, g, want)
				}
			}
		})
	}
	// Senders a multiple of the servers: sender i to server i mod S alone,
	// as before the spread.
	p, _ := spreadBulk(0.5, []float64{R, R}, []float64{R, R, R, R})
	for i, w := range p.weights {
		if w[i%2] != 1 {
			t.Errorf("sender %d weights %v, want all to server %d", i, w, i%2)
		}
	}
}

// TestPickerFollowsWeights checks the smooth weighted round robin: every
// prefix of its choices is within one of the weights' proportions.
func TestPickerFollowsWeights(t *testing.T) {
	w := []float64{0.5, 0.25, 0, 0.25}
	p := newPicker(w)
	n := make([]float64, len(w))
	for k := 1; k <= 400; k++ {
		n[p.next()]++
		for i := range w {
			if math.Abs(n[i]-w[i]*float64(k)) > 1 {
				t.Fatalf("after %d picks %v, want about %v", k, n, w)
			}
		}
	}
}

// TestBulkLoadSpreads runs one bulk sender against two sinks at load 0.5
// of each sink's link: each gets about half its rate (docs/farmem.md).
func TestBulkLoadSpreads(t *testing.T) {
	top := bulkStar(t, 3)
	p, err := spreadBulk(0.5, []float64{10e9, 10e9}, []float64{10e9})
	if err != nil {
		t.Fatal(err)
	}
	s := sim.New()
	n, err := sim.NewNetwork(s, top, sim.Options{Seed: 1, Pipeline: fwd.SimPipeline})
	if err != nil {
		t.Fatal(err)
	}
	sinks := []*sink{{}, {}}
	var dests []emulator.Addr
	for i, h := range []string{"h2", "h3"} {
		if _, err := n.Attach(h, BulkPort, sinks[i]); err != nil {
			t.Fatal(err)
		}
		dests = append(dests, netip.AddrPortFrom(top.Node(h).IP, BulkPort))
	}
	b := newBulk(dests, p.weights[0], 9000, 10*units.Gbps, p.share[0], 50*time.Microsecond, func() bool { return false })
	if _, err := n.Attach("h1", BulkPort, b); err != nil {
		t.Fatal(err)
	}
	const horizon = 200 * time.Millisecond
	s.RunUntil(sim.FromDuration(horizon))
	for i, k := range sinks {
		got := float64(k.bytes) * 8 / horizon.Seconds() / 10e9
		t.Logf("sink %d: %.3f of its link", i, got)
		if got < 0.42 || got > 0.58 {
			t.Errorf("sink %d got %.3f of its link, want 0.5", i, got)
		}
	}
}

// bulkStar is a star of 10 Gbps hosts with deep buffers.
func bulkStar(t *testing.T, hosts int) *topologies.Topology {
	t.Helper()
	f, err := topologies.Generate(topologies.Params{Generate: "star", Hosts: hosts, Rate: 10 * units.Gbps, Delay: units.Duration(time.Microsecond), Buffer: 64 * units.MiB})
	if err != nil {
		t.Fatal(err)
	}
	top, err := f.Build("star")
	if err != nil {
		t.Fatal(err)
	}
	return top
}

// TestBulkBackpressure: on a link slower than one frame per burst (a
// 9000-byte frame takes 720 µs at 100 Mbps; bursts last 50 µs) a bulk
// sender's NIC queue stays within its bound, and the frames it held back
// are counted, instead of the queue growing without end.
func TestBulkBackpressure(t *testing.T) {
	f, err := topologies.Generate(topologies.Params{Generate: "star", Hosts: 2, Rate: 100 * units.Mbps, Delay: units.Duration(time.Microsecond), Buffer: 64 * units.MiB})
	if err != nil {
		t.Fatal(err)
	}
	top, err := f.Build("slow")
	if err != nil {
		t.Fatal(err)
	}
	s := sim.New()
	n, err := sim.NewNetwork(s, top, sim.Options{Seed: 1, Pipeline: fwd.SimPipeline})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Attach("h2", BulkPort, &sink{}); err != nil {
		t.Fatal(err)
	}
	b := newBulk([]emulator.Addr{netip.AddrPortFrom(top.Node("h2").IP, BulkPort)}, []float64{1}, 9000, 100*units.Mbps, 0.5, 50*time.Microsecond, func() bool { return false })
	if _, err := n.Attach("h1", BulkPort, b); err != nil {
		t.Fatal(err)
	}
	s.RunUntil(sim.FromDuration(2 * time.Second))
	st, err := n.Stats("h1", 1)
	if err != nil {
		t.Fatal(err)
	}
	bound := int64(b.maxBacklog) * 9000
	t.Logf("sent %d frames, held back %d; NIC backlog at most %d bytes (bound %d)", b.sent, b.throttled, st.MaxQueueBytes, bound)
	if st.MaxQueueBytes > bound || b.throttled == 0 {
		t.Errorf("NIC backlog %d bytes, bound %d; %d frames held back", st.MaxQueueBytes, bound, b.throttled)
	}
	// The link is busy all the time (the sender offers more than it
	// carries) but no more.
	if got := float64(st.TxBytes) * 8 / 2 / 100e6; got < 0.95 || got > 1.01 {
		t.Errorf("link utilization %.3f, want about 1", got)
	}
}
