package training

import (
	"fmt"
	"math"
	"testing"

	"github.com/tracebed/tracebed/experiments"
)

// crossRackSpec is dynaina-netns's scenario across racks: a leaf-spine of
// two racks of 4 hosts, a job of 6 workers that must span both racks and
// one of 2 in a rack, at packet level (scaled 1:10000) on sim.
const crossRackSpec = `name: crossrack
kind: ina
substrate: sim
seeds: [1]
scale: 10000
topology: {generate: leafspine, spines: 2, leaves: 2, hosts_per_leaf: 4, rate: 100Gbps, delay: 1us, aggregators: 840}
workload:
  granularity: %s
  compute_scale: 0.1
  jitter: 0.02
  turnaround: 10us
  host_turnaround: 2ms
  host_latency: 0s
  job_list:
    - {arrival: 0s, model: vgg16, workers: 6, iterations: 12}
    - {arrival: 50ms, model: bert-large, workers: 2, iterations: 12}
policies: [noina, switchml, atp, dynaina]
scenarios:
  - {name: clean}
  - {name: lossy, loss: 0.01}
  - {name: published, atp_hold: return, atp_collisions: remap}
`

// TestPacketLevelAcrossRacks runs jobs across racks with real packets:
// the INA policies aggregate the 6-worker job in two levels (its racks'
// ToRs, then a spine: fabric.Cluster.Tree, as the flow model), every
// all-reduced tensor is verified exact by the workers with and without
// loss (a run fails otherwise), and on the clean network every policy's
// average JCT is within 8% of the flow model's, ATP's not below it (the
// tolerances of TestPacketMatchesFlow).
func TestPacketLevelAcrossRacks(t *testing.T) {
	if testing.Short() {
		t.Skip("packet-level runs of four policies: skipped with -short")
	}
	open := func(granularity string) *experiments.Spec {
		spec, err := experiments.ParseSpec("crossrack.yaml", []byte(fmt.Sprintf(crossRackSpec, granularity)), nil)
		if err != nil {
			t.Fatal(err)
		}
		return spec
	}
	pk := execute(t, open("packet"), nil)
	flowSpec := open("flow")
	flowSpec.Scenarios = append(flowSpec.Scenarios[:1], flowSpec.Scenarios[2])
	fl := execute(t, flowSpec, nil)
	for _, p := range pk.Policies {
		for _, sc := range []string{"clean", "lossy", "published"} {
			a := pk.Aggregate(sc, p)
			if p != "noina" && a[MetricINAFraction].Mean <= 0 {
				t.Errorf("%s/%s: ina_fraction %v: nothing aggregated in the switches", sc, p, a[MetricINAFraction].Mean)
			}
		}
		a, b := avgJCT(t, pk, "clean", p), avgJCT(t, fl, "clean", p)
		t.Logf("%-9s packet level %.3f s, flow level %.3f s (%+.1f%%), lossy %.3f s; ATP as published: packet %.3f s, flow %.3f s", p, a, b, 100*(a/b-1),
			avgJCT(t, pk, "lossy", p), avgJCT(t, pk, "published", p), avgJCT(t, fl, "published", p))
		switch {
		case p == "atp" && a < b*0.99:
			t.Errorf("atp: packet level %.3f s below the flow model's best case %.3f s", a, b)
		case p != "atp" && math.Abs(a/b-1) > 0.08:
			t.Errorf("%s: packet level %.3f s is %+.1f%% off the flow level %.3f s; want within 8%%", p, a, 100*(a/b-1), b)
		}
	}
}
