package training

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/tracebed/tracebed/experiments"
)

// TestSoakDeterministic: random ina specs — one rack or a leaf-spine
// (two-level aggregation), memory from none to plenty, random job mixes,
// seeds and every policy — give byte-identical results.json (the
// Marshal'd results) in two executions, one run at a time and two in
// parallel. One spec runs FreeINA's packet level on sim with a random
// seed.
func TestSoakDeterministic(t *testing.T) {
	n := 6
	if testing.Short() {
		n = 2
	}
	for i := range uint64(n) {
		r := rand.New(rand.NewPCG(i, 0xde7))
		topo := fmt.Sprintf("{generate: star, hosts: %d, rate: %dGbps, delay: 1us, aggregators: %d}",
			8+r.IntN(24), []int{10, 25, 100}[r.IntN(3)], []int{0, 64, 512, 2048}[r.IntN(4)])
		if r.IntN(2) == 0 {
			topo = fmt.Sprintf("{generate: leafspine, spines: %d, leaves: %d, hosts_per_leaf: %d, rate: 100Gbps, delay: 1us, aggregators: %d}",
				1+r.IntN(2), 2+r.IntN(3), 4+r.IntN(4), []int{0, 256, 1024}[r.IntN(3)])
		}
		body := fmt.Sprintf(`kind: ina
seeds: [%d, %d]
topology: %s
workload: {jobs: %d, gpu_time: [10s, 1m], mix: %s, workers: {"2": 1, "4": 1, "8": 1}, compute_scale: 0.1, jitter: %.3f}
policies: [noina, switchml, atp, dynaina, freeina]
scenarios:
  - {name: a}
  - {name: b, load: 2}
`, 1+r.IntN(1000), 1001+r.IntN(1000), topo, 2+r.IntN(9), []string{"vision", "language", "mixed"}[r.IntN(3)], 0.05*r.Float64())
		t.Run(fmt.Sprintf("flow%d", i), func(t *testing.T) {
			spec, err := experiments.ParseSpec(filepath.Join(t.TempDir(), "soak.yaml"), []byte(body), embedded)
			if err != nil {
				t.Fatalf("%v\n%s", err, body)
			}
			sameResultsJSON(t, spec, body)
		})
	}
	t.Run("freeina-packet", func(t *testing.T) {
		spec := freeSpec(t, "freeina-netns", []string{"jobs-2"}, []string{"freeina"}, 2)
		spec.Seeds = []int64{rand.New(rand.NewPCG(uint64(n), 0xde7)).Int64N(1 << 20)}
		spec.Substrate = "sim"
		sameResultsJSON(t, spec, fmt.Sprintf("freeina-netns, seed %v", spec.Seeds))
	})
}

// sameResultsJSON executes spec twice, with one run at a time and with
// two in parallel, and compares the results.json each would write.
func sameResultsJSON(t *testing.T, spec *experiments.Spec, desc string) {
	t.Helper()
	exp, err := Kind{}.Compile(spec)
	if err != nil {
		t.Fatalf("%v\n%s", err, desc)
	}
	var out [][]byte
	for _, par := range []int{1, 2} {
		res, err := experiments.Execute(context.Background(), spec, exp, experiments.Options{Parallel: par, Version: "test"})
		if err != nil {
			t.Fatalf("%v\n%s", err, desc)
		}
		js, err := res.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, js)
	}
	if !bytes.Equal(out[0], out[1]) {
		t.Errorf("results.json differs between two executions of one spec:\n%s", desc)
	}
}
