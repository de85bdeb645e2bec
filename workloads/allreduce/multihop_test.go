package allreduce

import (
	"testing"
	"time"

	"github.com/tracebed/tracebed/emulator/sim"
	"github.com/tracebed/tracebed/internal/units"
)

// TestMultiHop binds jobs to a spine and to a leaf of a leaf-spine fabric
// whose every switch runs the INA pipeline, with workers on several leaves:
// data packets cross switches that only forward them, results reach workers
// several hops away, and the sums are exact under impairments.
func TestMultiHop(t *testing.T) {
	top := fabricTopo(t, 3, 100*units.Gbps, 64, 0.01)
	s, n := newNet(t, top, testK, 8)
	g := gradients{seed: 8, limit: 1 << 20}
	specs := []JobSpec{
		{ID: 1, Mode: ModeINA, Hosts: []string{"h1", "h4", "h7", "h8"}, Switch: "spine1", Base: 0, Size: 16},
		{ID: 2, Mode: ModeINA, Hosts: []string{"h2", "h5", "h9"}, Switch: "leaf1", Base: 0, Size: 16},
		{ID: 3, Mode: ModeINA, Shared: true, Hosts: []string{"h3", "h6"}, PSHost: "h9", Switch: "spine2", Base: 0, Size: 4, Window: 16},
	}
	jobs := setupJobs(t, n, g, specs, func(spec *JobSpec) {
		spec.K, spec.Elements, spec.Iterations, spec.Timeout = testK, 2000, 2, 100*time.Microsecond
	})
	runJobs(t, s, jobs, sim.Second)
}
