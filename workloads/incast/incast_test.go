package incast

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/tracebed/tracebed/emulator/sim"
	"github.com/tracebed/tracebed/internal/units"
)

// expected is the closed form of an incast in which every sender emits one
// frame per serialization time T (an integer number of nanoseconds) and the
// propagation delay d is below T, so that at each slot boundary the switch
// finishes a frame before the next N arrive. With Q = floor(B/S) frames
// fitting the egress queue:
//
//	lossless when (N-1)·M <= Q: delivered = N·M, backlog peaks at (N-1)·M frames
//	otherwise:                  delivered = M + Q, drops = (N-1)·M - Q, peak Q frames
//	completion = (delivered + 1)·T + 2d   (the egress never idles once started)
type expected struct {
	delivered, drops int
	completion       sim.Time
	maxQueue         int64
}

func closedForm(p Params, pol Policy) expected {
	n, m := p.Senders, p.Packets
	s := int64(p.Size)
	q := int(int64(pol.Buffer) / s)
	t := sim.Time(units.TransmitTime(p.Size, p.Rate))
	d := sim.FromDuration(time.Duration(p.Delay))
	var e expected
	if (n-1)*m <= q {
		e.delivered, e.maxQueue = n*m, int64((n-1)*m)*s
	} else {
		e.delivered, e.drops, e.maxQueue = m+q, (n-1)*m-q, int64(q)*s
	}
	e.completion = sim.Time(e.delivered+1)*t + 2*d
	return e
}

func TestClosedForm(t *testing.T) {
	us := units.Duration(time.Microsecond)
	tests := []struct {
		name string
		p    Params
		pol  Policy
	}{
		{"one sender", Params{Senders: 1, Packets: 100, Size: 1500, Rate: 10 * units.Gbps, Delay: us}, Policy{Buffer: 64 * units.KiB}},
		{"lossless fan-in 4", Params{Senders: 4, Packets: 100, Size: 1500, Rate: 10 * units.Gbps, Delay: us}, Policy{Buffer: 4 * units.MiB}},
		{"shallow fan-in 8", Params{Senders: 8, Packets: 200, Size: 1500, Rate: 10 * units.Gbps, Delay: us}, Policy{Buffer: 64 * units.KiB}},
		{"exact fit", Params{Senders: 3, Packets: 50, Size: 1000, Rate: 10 * units.Gbps, Delay: units.Duration(500)}, Policy{Buffer: 100_000}},
		{"one over", Params{Senders: 3, Packets: 51, Size: 1000, Rate: 10 * units.Gbps, Delay: units.Duration(500)}, Policy{Buffer: 100_000}},
		{"fan-in 32 no delay", Params{Senders: 32, Packets: 50, Size: 1500, Rate: 10 * units.Gbps}, Policy{Buffer: 150_000}},
		{"100G", Params{Senders: 16, Packets: 300, Size: 1500, Rate: 100 * units.Gbps, Delay: units.Duration(100)}, Policy{Buffer: units.MiB}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if T := units.TransmitTime(tt.p.Size, tt.p.Rate); T%1000 != 0 || int64(tt.p.Delay)*1000 >= T {
				t.Fatalf("the closed form needs T in whole ns and d < T; T = %d ps, d = %v", T, tt.p.Delay)
			}
			want := closedForm(tt.p, tt.pol)
			o, err := Simulate(context.Background(), tt.p, tt.pol, 1, nil)
			if err != nil {
				t.Fatal(err)
			}
			got := expected{o.Delivered, o.Drops, o.Completion, o.MaxQueue}
			if got != want {
				t.Errorf("simulated %+v, closed form %+v", got, want)
			}
		})
	}
}

// TestLatenciesLossless checks every frame's latency in a lossless incast.
// Frame k of the sender served i-th among the N that arrive together leaves
// the switch as the (k·N+i)-th frame, so it arrives at (k·N+i+2)·T + 2d
// after being sent at k·T.
func TestLatenciesLossless(t *testing.T) {
	p := Params{Senders: 5, Packets: 40, Size: 1500, Rate: 10 * units.Gbps, Delay: units.Duration(500)}
	o, err := Simulate(context.Background(), p, Policy{Buffer: units.MiB}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	T := time.Duration(units.TransmitTime(p.Size, p.Rate) / 1000)
	d := time.Duration(p.Delay)
	var want []time.Duration
	for k := range p.Packets {
		for i := range p.Senders {
			want = append(want, time.Duration(k*p.Senders+i+2)*T+2*d-time.Duration(k)*T)
		}
	}
	slices.Sort(want)
	if got := o.Latencies.Sorted(); !slices.Equal(got, want) {
		t.Errorf("latencies differ from the closed form:\n got %v…\nwant %v…", got[:8], want[:8])
	}
}

func TestSeedDoesNotMatterWithoutImpairments(t *testing.T) {
	p := Params{Senders: 6, Packets: 100, Size: 1500, Rate: 10 * units.Gbps, Delay: units.Duration(time.Microsecond)}
	a, _ := Simulate(context.Background(), p, Policy{Buffer: 64 * units.KiB}, 1, nil)
	b, _ := Simulate(context.Background(), p, Policy{Buffer: 64 * units.KiB}, 99, nil)
	if a.Delivered != b.Delivered || a.Completion != b.Completion || !slices.Equal(a.Latencies.Sorted(), b.Latencies.Sorted()) {
		t.Error("a lossless, deterministic network depends on the seed")
	}
}

// BenchmarkIncastMillion runs an incast of 10^6 frames (16 senders × 62,500).
func BenchmarkIncastMillion(b *testing.B) {
	p := Params{Senders: 16, Packets: 62_500, Size: 1500, Rate: 100 * units.Gbps, Delay: units.Duration(100)}
	for b.Loop() {
		o, err := Simulate(context.Background(), p, Policy{Buffer: units.MiB}, 1, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(o.Events), "events/op")
	}
	b.ReportMetric(1e6, "frames/op")
}
