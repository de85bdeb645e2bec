package allreduce

import (
	"math"
	"testing"
	"time"

	"github.com/tracebed/tracebed/emulator/frame"
	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/p4/ina"
)

// closedForm is the completion time of one job alone on an idle star whose
// links have rate R and one-way delay d, with no switch latency.
//
// INA (pool mode), n workers, C = ⌈E/k⌉ chunks of frames of S = 66+4k bytes,
// t = 8S/R, window W:
//
//	RTT   = 2t + 2d                      a chunk's send start to its result's arrival
//	t_eff = max(t, RTT/W)                line rate, or W chunks per RTT
//	T_ar  = C·t_eff + RTT
//	JCT   = iterations × (compute + T_ar)
//
// Parameter server only: the PS's link carries every worker's chunk, so
// t_eff = max(n·t, RTT/W) with RTT = 2t + 2d + (n−1)t (a worker's packet
// queues behind the other workers' at the PS).
//
// Ring: each node sends P = Σ over its 2(N−1) steps of ⌈segment/k⌉ frames of
// S_r = 58+4k bytes and about P/8 acknowledgements of t_ack = 62 bytes on
// its link. Packets are pipelined across steps, so the link never idles
// until the end: the node's last packet in, one ring hop (two links) after
// the predecessor's last packet out, and the acknowledgement of its own
// last packet back, one hop more:
//
//	T_ar = P·(t_r + t_ack/8) + 2(t_r + d) + 2(t_ack + d)
func closedForm(spec JobSpec, rate units.Rate, d time.Duration) time.Duration {
	sec := func(bytes int) float64 { return float64(bytes) * 8 / float64(rate) }
	k, n := spec.K, len(spec.Hosts)
	dd := d.Seconds()
	var tar float64
	switch spec.Mode {
	case ModeINA:
		C := (spec.Elements + k - 1) / k
		t := sec(frame.HeaderLen + ina.HeaderLen + 4*k)
		rtt := 2*t + 2*dd
		tar = float64(C)*math.Max(t, rtt/float64(spec.Window)) + rtt
	case ModePS:
		C := (spec.Elements + k - 1) / k
		t := sec(frame.HeaderLen + ina.HeaderLen + 4*k)
		rtt := 2*t + 2*dd + float64(n-1)*t
		tar = float64(C)*math.Max(float64(n)*t, rtt/float64(spec.Window)) + rtt
	case ModeRing:
		P := 0
		for s := range n {
			seg := (s+1)*spec.Elements/n - s*spec.Elements/n
			P += (seg + k - 1) / k
		}
		// Every node sends every segment but one twice (reduce-scatter and
		// all-gather): 2(N−1) of N segments; by symmetry use the average.
		P = P * 2 * (n - 1) / n
		tr := sec(frame.HeaderLen + ringHeaderLen + 4*k)
		ta := sec(frame.HeaderLen + ringAckLen)
		tar = float64(P)*(tr+ta/8) + 2*(tr+dd) + 2*(ta+dd)
	}
	return time.Duration(float64(spec.Iterations) * (spec.Compute.Seconds() + tar) * 1e9)
}

// TestClosedFormCompletion runs one job alone on an idle star and checks its
// completion time against the closed form, within 5%.
func TestClosedFormCompletion(t *testing.T) {
	tests := []struct {
		name  string
		spec  JobSpec
		rate  units.Rate
		delay time.Duration
	}{
		{"ina line rate", JobSpec{Mode: ModeINA, Size: 256, Elements: 200_000, Iterations: 3, Compute: 500 * time.Microsecond}, 100 * units.Gbps, time.Microsecond},
		{"ina window-limited", JobSpec{Mode: ModeINA, Size: 8, Elements: 100_000, Iterations: 2, Compute: 200 * time.Microsecond}, 100 * units.Gbps, time.Microsecond},
		{"ina 10G k=32", JobSpec{Mode: ModeINA, K: 32, Size: 64, Elements: 50_000, Iterations: 2, Compute: time.Millisecond}, 10 * units.Gbps, 2 * time.Microsecond},
		{"parameter server", JobSpec{Mode: ModePS, Window: 128, Elements: 50_000, Iterations: 2, Compute: 100 * time.Microsecond}, 100 * units.Gbps, time.Microsecond},
		{"ring", JobSpec{Mode: ModeRing, Elements: 200_000, Iterations: 2, Compute: 100 * time.Microsecond}, 100 * units.Gbps, time.Microsecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			spec := tt.spec
			spec.ID, spec.Hosts, spec.PSHost, spec.Switch = 1, hostNames(1, 8), "h9", "tor"
			if spec.K == 0 {
				spec.K = ina.DefaultK
			}
			if spec.Window == 0 {
				spec.Window = int(spec.Size)
			}
			top := starTopo(t, netParams{hosts: 9, rate: tt.rate, delay: tt.delay, aggregators: 1024, buffer: 64 * units.MiB})
			s, n := newNet(t, top, spec.K, 1)
			j, err := Setup(n, spec)
			if err != nil {
				t.Fatal(err)
			}
			s.Run()
			if !j.Done() || j.Err != nil {
				t.Fatalf("job not done: %v", j.Err)
			}
			want := closedForm(spec, tt.rate, tt.delay)
			rel := (j.Finish.Seconds() - want.Seconds()) / want.Seconds()
			t.Logf("simulated %v, closed form %v (%+.2f%%)", j.Finish, want, 100*rel)
			if math.Abs(rel) > 0.05 {
				t.Errorf("simulated %v, closed form %v: %+.1f%%, want within 5%%", j.Finish, want, 100*rel)
			}
		})
	}
}
