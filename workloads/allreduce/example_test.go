package allreduce_test

import (
	"fmt"
	"time"

	"github.com/tracebed/tracebed/emulator/sim"
	"github.com/tracebed/tracebed/p4/ina"
	"github.com/tracebed/tracebed/topologies"
	"github.com/tracebed/tracebed/workloads/allreduce"
)

// A 4-worker job aggregating 1 MB through the ready star's switch, in a pool
// of 128 aggregators, for 3 iterations of 100µs of compute each.
func ExampleSetup() {
	top, err := topologies.Open("star.yaml")
	if err != nil {
		panic(err)
	}
	s := sim.New()
	net, err := sim.NewNetwork(s, top, sim.Options{Seed: 1, Pipeline: ina.SimPipeline(ina.DefaultK)})
	if err != nil {
		panic(err)
	}
	job, err := allreduce.Setup(net, allreduce.JobSpec{
		ID: 1, Mode: allreduce.ModeINA, Hosts: []string{"h1", "h2", "h3", "h4"}, Switch: "tor",
		Base: 0, Size: 128, Elements: 250_000, Iterations: 3, Compute: 100 * time.Microsecond,
		Fill: func(w, it int, t []int32) {
			for i := range t {
				t[i] = int32(w + it)
			}
		},
	})
	if err != nil {
		panic(err)
	}
	s.Run()
	st := job.Stats()
	fmt.Printf("finished at %v, %d chunks, INA fraction %.0f%%, sum of the last iteration %d\n",
		st.Finish.Round(time.Microsecond), st.Chunks, 100*st.INAFraction, job.Workers[0].Tensor[0])
	// Output: finished at 608µs, 11721 chunks, INA fraction 100%, sum of the last iteration 14
}
