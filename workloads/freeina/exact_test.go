package freeina

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tracebed/tracebed/internal/units"
	sysfree "github.com/tracebed/tracebed/systems/freeina"
	jobtrace "github.com/tracebed/tracebed/traces/jobs"
	"github.com/tracebed/tracebed/workloads/training/fabric"
)

// TestExactUnderImpairments runs several jobs at once — competing for a
// switch memory that does not hold every job's window, so rounds go both
// paths — on links that lose, duplicate and reorder 0, 1 and 5% of their
// frames, with the hosts' path rule as it is and with a rule that never
// leaves the INA path (so that the INA path runs under loss too). Every
// run must end with every all-reduced sum exact at every worker and no
// breach of the RC contract at any host: every packet's ICRC right, every
// INA packet with its sender's PSN and the exact sum of its chunk (even
// duplicates), every message once and in order at its receiver (Run
// fails otherwise).
func TestExactUnderImpairments(t *testing.T) {
	jobs := []jobtrace.Job{
		{ID: 0, Model: "a", Workers: 3, Iterations: 4},
		{ID: 1, Model: "b", Workers: 4, Iterations: 3},
		{ID: 2, Model: "a", Workers: 2, Iterations: 4, Arrival: 200 * time.Microsecond},
	}
	for i, imp := range []struct {
		name               string
		loss, dup, reorder float64
	}{{"clean", 0, 0, 0}, {"loss-1", 0.01, 0, 0}, {"all-1", 0.01, 0.01, 0.01}, {"loss-5", 0.05, 0, 0}, {"all-5", 0.05, 0.05, 0.05}} {
		for j, rule := range []string{"rule", "ina-always"} {
			// One seed per case, a different one for each (the time of
			// make test); every impairment runs under both rules.
			seed := uint64(1 + 2*i + j)
			t.Run(fmt.Sprintf("%s/%s/%d", imp.name, rule, seed), func(t *testing.T) {
				// Memory for about two of the jobs' windows.
				tb, sc := testbedOf(t, 9, 48, 3, 10*units.Gbps, imp.loss, imp.dup, imp.reorder, seed)
				ctl := sysfree.DefaultControl
				if rule == "ina-always" {
					ctl.Margin = 1000
				}
				o, err := Run(context.Background(), Setup{Testbed: tb, Workers: sc.Workers, Controller: sc.Controller, PS: sc.PS,
					Net: fabric.DefaultNet, Jobs: jobs, Lookup: smallModels, Policy: freePolicy, Seed: seed, Control: ctl,
					Timeout: time.Millisecond, Limit: 30 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				if o.Rounds != 11 {
					t.Fatalf("%d all-reduces, want 11", o.Rounds)
				}
				t.Logf("%d INA and %d PS all-reduces; devices: %d retransmitted, %d timeouts, %d NAKs, %d duplicates; switch: %d answers, drops %v",
					o.RoundsINA, o.Rounds-o.RoundsINA, o.Devices.Retransmitted, o.Devices.Timeouts, o.Devices.SeqNAKsSent, o.Devices.Duplicates,
					o.Switch.Answers, o.Switch.Drops)
			})
		}
	}
}
