package training

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/tracebed/tracebed/experiments"
)

// packetSoak is the number of random specs of TestSoakPacketPolicies; 0
// keeps the default (one under -short). A long soak:
//
//	go test ./workloads/training -run SoakPacketPolicies -training.soak 200 -timeout 2h
var packetSoak = flag.Int("training.soak", 0, "random specs of TestSoakPacketPolicies (0: the default count)")

// TestSoakPacketPolicies runs DynaINA and its baselines (SwitchML, ATP,
// no INA) with packets on sim, on random fabrics: one rack or a
// leaf-spine whose jobs across racks aggregate in two levels, memory from
// far less than one window to plenty, random loss of 0–5%, two or three
// jobs of random models and sizes, random seeds. The workers verify every
// all-reduced tensor against the exact sum (a run fails otherwise), and
// every job must complete; the INA policies must aggregate something in
// the switches when they have memory and no loss disturbs them.
func TestSoakPacketPolicies(t *testing.T) {
	n := 4
	switch {
	case *packetSoak > 0:
		n = *packetSoak
	case testing.Short():
		n = 1
	}
	models := []string{"resnet50", "vgg16", "bert-base", "alexnet"}
	for i := range uint64(n) {
		r := rand.New(rand.NewPCG(i, 0x9ac))
		aggs := []int{64, 256, 840, 4096}[r.IntN(4)]
		topo := fmt.Sprintf("{generate: star, hosts: %d, rate: 100Gbps, delay: 1us, aggregators: %d}", 6+r.IntN(4), aggs)
		if r.IntN(2) == 0 {
			topo = fmt.Sprintf("{generate: leafspine, spines: %d, leaves: 2, hosts_per_leaf: %d, rate: 100Gbps, delay: 1us, aggregators: %d}", 1+r.IntN(2), 3+r.IntN(2), aggs)
		}
		var jobs []string
		for j := range 2 + r.IntN(2) {
			jobs = append(jobs, fmt.Sprintf("    - {arrival: %dms, model: %s, workers: %d, iterations: %d}", j*r.IntN(40), models[r.IntN(len(models))], 2+r.IntN(3), 2+r.IntN(3)))
		}
		loss := 0.05 * r.Float64()
		seed := 1 + r.IntN(1000)
		body := fmt.Sprintf(`name: soak
kind: ina
substrate: sim
seeds: [%d]
scale: 10000
topology: %s
workload:
  granularity: packet
  compute_scale: 0.1
  turnaround: 10us
  host_turnaround: 2ms
  host_latency: 0s
  job_list:
%s
policies: [noina, switchml, atp, dynaina]
scenarios:
  - {name: clean}
  - {name: lossy, loss: %.4f}
`, seed, topo, strings.Join(jobs, "\n"), loss)
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			spec, err := experiments.ParseSpec("soak.yaml", []byte(body), nil)
			if err != nil {
				t.Fatalf("%v\n%s", err, body)
			}
			res := execute(t, spec, nil)
			for _, p := range res.Policies {
				for _, sc := range []string{"clean", "lossy"} {
					a := res.Aggregate(sc, p)
					if sc == "clean" && p != "noina" && a[MetricINAFraction].Mean <= 0 && aggs >= 840 {
						t.Errorf("%s/%s: ina_fraction %v with %d aggregators", sc, p, a[MetricINAFraction].Mean, aggs)
					}
					if m := a[MetricMemUtil].Mean; m < 0 || m > 1 {
						t.Errorf("%s/%s: mem_util %v", sc, p, m)
					}
				}
			}
			if t.Failed() {
				t.Logf("spec:\n%s", body)
			}
		})
	}
}
