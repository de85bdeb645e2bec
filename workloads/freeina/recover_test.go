package freeina

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/dataplane"
	"github.com/tracebed/tracebed/emulator/frame"
	"github.com/tracebed/tracebed/emulator/roce/wire"
	"github.com/tracebed/tracebed/emulator/testbed"
	"github.com/tracebed/tracebed/internal/units"
	dp "github.com/tracebed/tracebed/p4/freeina"
	sysfree "github.com/tracebed/tracebed/systems/freeina"
	"github.com/tracebed/tracebed/topologies"
	jobtrace "github.com/tracebed/tracebed/traces/jobs"
	"github.com/tracebed/tracebed/traces/models"
	"github.com/tracebed/tracebed/workloads/training/fabric"
	"github.com/tracebed/tracebed/workloads/training/packet"
)

// smallModels are the models of the tests with several jobs: small
// gradients of 96 and 160 KiB (96 and 160 chunks of 1 KiB).
func smallModels(name string) (models.Profile, bool) {
	switch name {
	case "a":
		return models.Profile{Name: "a", GradientBytes: 96 << 10, Compute: 300 * time.Microsecond}, true
	case "b":
		return models.Profile{Name: "b", GradientBytes: 160 << 10, Compute: 200 * time.Microsecond}, true
	}
	return models.Profile{}, false
}

// TestOverflowRecovered: gradients whose sums exceed the switch's 32 bits
// (Setup.Overflow: a share of the chunks span the whole int32 range).
// The switch flags their results; the hosts re-aggregate exactly those
// chunks on the PS path, which sums in 64 bits, and back off the INA
// path as after any failure, so the all-reduces that follow on the PS
// path carry overflowing sums too (64-bit sums). Every sum must be exact
// (Run checks every value against the 64-bit sum), no breach of RC, no
// connection re-established, and the chunks recovered are the ones the
// switch flagged. With loss, duplication and reordering too.
func TestOverflowRecovered(t *testing.T) {
	jobs := []jobtrace.Job{
		{ID: 0, Model: "a", Workers: 3, Iterations: 5},
		{ID: 1, Model: "b", Workers: 4, Iterations: 4},
	}
	for _, tc := range []struct {
		name               string
		share              float64
		loss, dup, reorder float64
	}{{"clean", 0.01, 0, 0, 0}, {"all-1", 0.01, 0.01, 0.01, 0.01}, {"every-chunk", 1, 0, 0, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			tb, sc := testbedOf(t, 8, 1024, 2, 10*units.Gbps, tc.loss, tc.dup, tc.reorder, 5)
			o, err := Run(context.Background(), Setup{Testbed: tb, Workers: sc.Workers, Controller: sc.Controller, PS: sc.PS,
				Net: fabric.DefaultNet, Jobs: jobs, Lookup: smallModels, Policy: freePolicy, Seed: 5, Overflow: tc.share,
				Limit: 30 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			ps := o.Rounds - o.RoundsINA - o.Recovered
			t.Logf("%d all-reduces: %d on INA, %d recovered (%d chunks), %d on the PS path; switch: %d overflowed results; %d given up, %d re-established",
				o.Rounds, o.RoundsINA, o.Recovered, o.RecoveredChunks, ps, o.Switch.Overflows, o.GaveUp, o.Reconnected)
			switch {
			case o.Rounds != 9:
				t.Errorf("%d all-reduces, want 9", o.Rounds)
			case o.Recovered < 1 || o.RecoveredChunks < o.Recovered:
				t.Errorf("%d all-reduces recovered, %d chunks: want some", o.Recovered, o.RecoveredChunks)
			case uint64(o.RecoveredChunks) != o.Switch.Overflows:
				t.Errorf("%d chunks recovered, the switch flagged %d", o.RecoveredChunks, o.Switch.Overflows)
			case o.GaveUp != 0 || o.Reconnected != 0:
				t.Errorf("%d connections gave up, %d re-established: an overflow needs neither", o.GaveUp, o.Reconnected)
			case ps < 1:
				t.Errorf("no all-reduce on the PS path: the failures did not back the hosts off")
			}
			if tc.share == 1 && o.RoundsINA != 0 {
				t.Errorf("%d all-reduces entirely on INA with every chunk overflowing", o.RoundsINA)
			}
		})
	}
}

// outage is a switch whose INA path stops answering for a while: from the
// after-th RoCEv2 frame that drop selects (by source and destination),
// it drops every one for span of testbed time. With drop selecting the
// frames between a job's workers — their INA connections and the
// acknowledgements, not the PS path, the control connections or the
// connection manager — it stands for a switch whose aggregation stalls,
// or a path to it that drops everything.
type outage struct {
	dataplane.Dataplane
	drop  func(src, dst netip.Addr) bool
	after int
	span  time.Duration

	seen       int
	dropped    int
	start, end time.Duration // of the outage, once it began
}

func (o *outage) Process(now time.Duration, in int, f []byte, out emulator.Emitter) {
	if h, _, err := frame.ParseUDP(f); err == nil && h.Dst.Port() == wire.Port && o.drop(h.Src.Addr(), h.Dst.Addr()) {
		o.seen++
		if o.seen == o.after {
			o.start, o.end = now, now+o.span
		}
		if o.seen >= o.after && now < o.end {
			o.dropped++
			return
		}
	}
	o.Dataplane.Process(now, in, f, out)
}

// TestRetryExceededRecovered: INA connections of one job give up (their
// requesters' 7 retries of a 1 ms timeout run out, the QPs go to ERR)
// while another job runs beside it.
//
//   - stall: the switch stops answering the job's INA path in the middle
//     of an all-reduce for 12 ms. Every worker's connection gives up; the
//     hosts stop the round's INA part, re-aggregate on the PS path the
//     chunks some worker lacks, re-establish every INA connection on
//     the same QPs with fresh PSNs, and back off the INA path, to which
//     they come back once the back-off is over.
//   - acks-lost: only the acknowledgements of worker 0's connection are
//     lost, for 12 ms: every chunk completes and every worker but 0
//     finishes the all-reduce; worker 0's connection gives up, the
//     others finish again with it, nothing is re-aggregated (every
//     result is in), and only that connection is re-established.
//
// Every run must end with every sum exact and no breach of RC at any
// host — on the connections that kept working too (the other job's
// all run on the INA path).
func TestRetryExceededRecovered(t *testing.T) {
	for _, tc := range []struct {
		name string
		// drop selects the frames lost, given job 0's worker addresses.
		drop func(w []netip.Addr) func(src, dst netip.Addr) bool
		// check looks at the outcome.
		check func(t *testing.T, o *Outcome)
	}{{
		name: "stall",
		drop: func(w []netip.Addr) func(src, dst netip.Addr) bool {
			in := func(a netip.Addr) bool { return a == w[0] || a == w[1] || a == w[2] || a == w[3] }
			return func(src, dst netip.Addr) bool { return in(src) && in(dst) }
		},
		check: func(t *testing.T, o *Outcome) {
			switch {
			case o.Recovered < 1 || o.RecoveredChunks < 1 || o.GaveUp < 1 || o.Reconnected < 1:
				t.Errorf("%d all-reduces recovered (%d chunks), %d connections gave up, %d re-established: want the stall recovered",
					o.Recovered, o.RecoveredChunks, o.GaveUp, o.Reconnected)
			case o.Jobs[0].RingRounds < o.Recovered+sysfree.DefaultControl.Backoff:
				t.Errorf("job 0: %d all-reduces on the PS path for %d recovered: the hosts did not back off", o.Jobs[0].RingRounds, o.Recovered)
			case o.Jobs[0].INARounds < 2:
				t.Errorf("job 0 never went back to the INA path after the stall")
			}
		},
	}, {
		name: "acks-lost",
		drop: func(w []netip.Addr) func(src, dst netip.Addr) bool {
			return func(src, dst netip.Addr) bool { return src == w[1] && dst == w[0] }
		},
		check: func(t *testing.T, o *Outcome) {
			switch {
			case o.GaveUp < 1 || o.Reconnected != o.GaveUp:
				t.Errorf("%d connections gave up, %d re-established: want worker 0's alone, each time", o.GaveUp, o.Reconnected)
			case o.RecoveredChunks != 0 || o.Recovered != 0:
				t.Errorf("%d all-reduces recovered, %d chunks: every result was in", o.Recovered, o.RecoveredChunks)
			case o.Jobs[0].RingRounds < sysfree.DefaultControl.Backoff:
				t.Errorf("job 0: %d all-reduces on the PS path: the hosts did not back off", o.Jobs[0].RingRounds)
			}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := topologies.Generate(topologies.Params{Generate: "star", Hosts: 8, Rate: 10 * units.Gbps, Delay: units.Duration(time.Microsecond),
				Aggregators: 1024})
			if err != nil {
				t.Fatal(err)
			}
			top, err := f.Build("star")
			if err != nil {
				t.Fatal(err)
			}
			sc, err := packet.ScaleTopology(top, fabric.DefaultNet, packet.ScaleParams{Factor: 1, Loss: -1, PSPerSwitch: 2})
			if err != nil {
				t.Fatal(err)
			}
			// Jobs take the lowest free workers, in rank order: job 0
			// the first four.
			var w []netip.Addr
			for _, name := range sc.Workers[:4] {
				w = append(w, sc.Top.Node(name).IP)
			}
			prog, err := dp.SwitchProgram()
			if err != nil {
				t.Fatal(err)
			}
			var cut *outage
			plain := prog.New
			prog.New = func(sw *topologies.Node, routes topologies.RouteTable) (dataplane.Dataplane, error) {
				d, err := plain(sw, routes)
				cut = &outage{Dataplane: d, drop: tc.drop(w), after: 500, span: 12 * time.Millisecond}
				return cut, err
			}
			tb, err := testbed.NewSim(testbed.Config{Topology: sc.Top, Program: &prog, Seed: 9})
			if err != nil {
				t.Fatal(err)
			}
			jobs := []jobtrace.Job{
				{ID: 0, Model: "b", Workers: 4, Iterations: 20},
				{ID: 1, Model: "a", Workers: 3, Iterations: 12},
			}
			o, err := Run(context.Background(), Setup{Testbed: tb, Workers: sc.Workers, Controller: sc.Controller, PS: sc.PS,
				Net: fabric.DefaultNet, Jobs: jobs, Lookup: smallModels, Policy: freePolicy, Seed: 9, Timeout: time.Millisecond,
				Limit: 30 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			for _, j := range o.Jobs {
				t.Logf("job %d: %d all-reduces on INA, %d on the PS path (recovered ones included); JCT %.6f s", j.ID, j.INARounds, j.RingRounds, j.JCT())
			}
			share := float64(o.Rounds-o.RoundsINA) / float64(o.Rounds)
			t.Logf("outage %v to %v, %d frames dropped; %d all-reduces recovered (%d chunks), %d connections gave up, %d re-established; ps_share %.3f; devices: %d error completions, %d timeouts",
				cut.start, cut.end, cut.dropped, o.Recovered, o.RecoveredChunks, o.GaveUp, o.Reconnected, share, o.Devices.CompletionsErr, o.Devices.Timeouts)
			switch {
			case cut.dropped == 0:
				t.Fatal("the outage dropped nothing")
			case o.Rounds != 32:
				t.Errorf("%d all-reduces, want 32", o.Rounds)
			case o.Jobs[1].INARounds != 12:
				t.Errorf("job 1, untouched by the outage, ran %d of its 12 all-reduces on INA", o.Jobs[1].INARounds)
			case o.Recovered > o.Rounds-o.RoundsINA:
				t.Errorf("%d all-reduces recovered, %d not on the INA path: ps_share leaves recovered ones out", o.Recovered, o.Rounds-o.RoundsINA)
			}
			tc.check(t, o)
		})
	}
}
