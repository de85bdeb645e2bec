package farmem

import (
	"context"
	"fmt"
	"testing"

	"github.com/tracebed/tracebed/experiments"
)

// FuzzAcceptedRuns checks the promise of validate for far memory: a spec
// Compile accepts runs, every policy and seed, to the end without an error.
// The inputs span what decides a run's length: the application, the link
// rate and delay, the local memory, the working set's size and the other
// tenant's load. A spec near the run limit is dry-run by Compile (dryRun);
// this target is what finds the estimates' blind spots. Its seeds run in
// make test (a few seconds); a search:
//
//	go test ./workloads/farmem -run '^$' -fuzz FuzzAcceptedRuns -fuzztime 10m
func FuzzAcceptedRuns(f *testing.F) {
	// Near the limit at line rates of gigabits, the other tenant's frames
	// alone are 10^8 events and more: minutes a run, within the default
	// --max-events, but not what a fuzz target can afford.
	for _, c := range []struct {
		app          uint8
		kbps, delay  uint32 // kbit/s, µs
		local, scale uint8  // %, index
		load         uint8  // quarters
	}{
		{0, 10_000_000, 20_000, 50, 0, 0}, // near the limit: dry-run, accepted
		{0, 10_000_000, 30_000, 50, 0, 0}, // near the limit: dry-run, refused
		{1, 1_000, 1, 90, 3, 2},           // a slow link behind the other tenant
		{3, 100_000, 10, 75, 2, 2},
		{4, 5_000, 100, 50, 3, 1},
		{5, 99_000_000, 1, 90, 3, 3},
	} {
		f.Add(c.app, c.kbps, c.delay, c.local, c.scale, c.load)
	}
	f.Fuzz(func(t *testing.T, app uint8, kbps, delay uint32, local, scale, load uint8) {
		names := []string{"kmeans", "quicksort", "linpack", "pagerank", "memcached", "stream"}
		bg := ""
		if q := load % 4; q > 0 {
			bg = fmt.Sprintf(", background: {senders: 1, load: %g, burst: 50us, frame: 9000B}", float64(q)/4)
		}
		yaml := fmt.Sprintf("kind: farmem\npolicies: [fastswap, glitter]\n"+
			"topology: {generate: star, hosts: 3, rate: %dkbps, delay: %dus}\n"+
			"workload: {hosts: 1, servers: 1, app: %s, memory_scale: %d, local_memory: %g%s}\n",
			max(kbps%100_000_000, 1), delay%1_000_000, names[int(app)%len(names)],
			[]int{256, 512, 1024, 2048}[scale%4], float64(local%96+5)/100, bg)
		spec, err := experiments.ParseSpec("fuzz.yaml", []byte(yaml), readEmbedded)
		if err != nil {
			t.Fatalf("the target built a bad spec: %v\n%s", err, yaml)
		}
		// As validate does: compile, the limits (small ones, so that every
		// input takes seconds), then the rehearsal.
		exp, err := Kind{}.Compile(spec)
		if err == nil {
			err = experiments.CheckLimits(spec, exp, acceptLimits)
		}
		if err == nil {
			err = experiments.Rehearse(context.Background(), exp)
		}
		if err != nil {
			t.Logf("refused: %v", err)
			return // other tests check the refusals
		}
		for _, r := range experiments.Runs(spec) {
			if _, err := exp.Run(context.Background(), r); err != nil {
				t.Fatalf("accepted, and then %s/%s/seed %d failed: %v\n%s", r.Scenario, r.Policy, r.Seed, err, yaml)
			}
		}
	})
}

// acceptLimits bound FuzzAcceptedRuns's inputs, as --max-memory and
// --max-events bound a user's: each input (a compile, a dry run and a run
// per policy) takes a few seconds, below the fuzzing engine's 10 s for an
// input that hangs.
var acceptLimits = experiments.Limits{Memory: 1 << 30, Events: 2e6}
