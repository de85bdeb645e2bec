package freeina

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/tracebed/tracebed/internal/units"
	sysfree "github.com/tracebed/tracebed/systems/freeina"
	"github.com/tracebed/tracebed/systems/inasched"
	jobtrace "github.com/tracebed/tracebed/traces/jobs"
	"github.com/tracebed/tracebed/workloads/training/fabric"
)

// TestClosedForm runs one job alone on a star (no loss, no jitter, no
// turnaround) and compares every all-reduce, from the controller's go to
// the last worker's done, with its closed form on each path; they must
// agree within 1%. With R the link rate, d the link delay, frames in
// bytes on the wire (Ethernet header to ICRC):
//
// INA path, C chunks of P bytes: each worker's link carries, per chunk,
// its own packet (F = 78 + P) and the acknowledgement (A = 62) of the
// aggregate it received; the other direction the aggregate and the
// acknowledgement of its own. Then the last aggregate's hop, the
// acknowledgement's two hops back to its sender, and the done message's
// two hops:
//
//	T = go + C·(F + A)·8/R + (F·8/R + d) + 2·(A·8/R + d) + done
//
// PS path, m messages of 64 KiB (16 packets: 66,484 bytes with their
// headers) from each of n workers: the parameter server's link carries,
// per message, every worker's and one acknowledgement each (the sums it
// sends back), and sends the sums of a message once all of it is in, so
// the last message's sums follow the rest:
//
//	T = go + (m + 1)·n·(66,484 + A)·8/R + 4·d + done
//
// where go and done are a control message's two hops (82 and 88 bytes:
// SEND headers, the message).
func TestClosedForm(t *testing.T) {
	const (
		R    = 10e9
		d    = 1e-6
		A    = 62.0
		msgB = 66484.0
	)
	ctlHops := func(bytes float64) float64 { return 2 * (bytes*8/R + d) }
	for _, tc := range []struct {
		workers     int
		grad        int64
		aggregators int
	}{{2, 512 << 10, 4096}, {5, 512 << 10, 4096}, {4, 2 << 20, 4}, {3, 1 << 20, 4}} {
		path := "ina"
		if tc.aggregators < 64 {
			path = "ps"
		}
		t.Run(fmt.Sprintf("%s/%d-workers/%dKiB", path, tc.workers, tc.grad>>10), func(t *testing.T) {
			tb, sc := testbedOf(t, tc.workers, tc.aggregators, 1, 10*units.Gbps, 0, 0, 0, 3)
			net := fabric.DefaultNet
			net.Jitter, net.Turnaround = 0, 0
			o, err := Run(context.Background(), Setup{Testbed: tb, Workers: sc.Workers, Controller: sc.Controller, PS: sc.PS,
				Net: net, Jobs: []jobtrace.Job{{ID: 0, Model: "m", Workers: tc.workers, Iterations: 3}},
				Lookup:  testProfile("m", tc.grad, time.Millisecond),
				Policy:  func(mem inasched.Memory, _ int) (inasched.Scheduler, error) { return sysfree.New(mem, false), nil },
				Seed:    1,
				Control: sysfree.PathControl{Margin: 10, Backoff: 1, MaxBackoff: 1}})
			if err != nil {
				t.Fatal(err)
			}
			var want float64
			took := o.TookINA
			if path == "ina" {
				P := float64(fabric.DefaultRDMAPayload)
				F := P + fabric.RDMAHeader
				C := float64(tc.grad) / P
				want = ctlHops(82) + C*(F+A)*8/R + (F*8/R + d) + 2*(A*8/R+d) + ctlHops(88)
			} else {
				took = o.TookPS
				m := math.Ceil(float64(tc.grad) / (64 << 10))
				want = ctlHops(82) + (m+1)*float64(tc.workers)*(msgB+A)*8/R + 4*d + ctlHops(88)
			}
			if len(took) != 3 {
				t.Fatalf("%d all-reduces on the %s path, want 3 (INA %v, PS %v)", len(took), path, o.TookINA, o.TookPS)
			}
			for i, got := range took {
				if e := got.Seconds()/want - 1; math.Abs(e) > 0.01 {
					t.Errorf("all-reduce %d: %v, closed form %.3f µs (%+.2f%%)", i, got, want*1e6, 100*e)
				} else {
					t.Logf("all-reduce %d: %v, closed form %.3f µs (%+.3f%%)", i, got, want*1e6, 100*e)
				}
			}
		})
	}
}
