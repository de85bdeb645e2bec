//go:build linux && !nonetns

package crossval

import (
	"cmp"
	"context"
	"math"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/tracebed/tracebed/analysis"
	"github.com/tracebed/tracebed/emulator/netns"
	"github.com/tracebed/tracebed/emulator/netns/mininet"
	"github.com/tracebed/tracebed/emulator/switch/switchcmd"
	"github.com/tracebed/tracebed/emulator/testbed/netnstb"
	"github.com/tracebed/tracebed/experiments"
	"github.com/tracebed/tracebed/p4/programs"
	"github.com/tracebed/tracebed/workloads/farmem"
	"github.com/tracebed/tracebed/workloads/training"
)

// prefix starts the run ids of this test binary (see netns.RunTests).
var prefix = "xv" + netns.NewRunID()[:1]

func TestMain(m *testing.M) {
	switchcmd.Main(programs.Registry) // the Go switches of the runs are this binary
	os.Exit(netns.RunTests(m, prefix))
}

// TestMininetCrossValidation runs the first scenario of dynaina-netns and
// of glitter-netns with tracebed's own bring-up and with Mininet building
// the network ('run --network mininet'): the policies must rank the same
// and each policy's headline metric (average JCT, throughput) must agree
// within 10%.
func TestMininetCrossValidation(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: the netns substrate needs root (CI runs as root)")
	}
	if err := mininet.Available(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	if testing.Short() {
		t.Skip("skipping in -short mode: about five minutes of real-time runs")
	}
	registry := experiments.NewRegistry(training.Kind{}, farmem.Kind{})
	restore, err := netnstb.Realtime(10)
	if err == nil {
		defer restore()
	} else {
		t.Logf("at normal priority: %v", err)
	}
	for _, tc := range []struct {
		spec, metric string
		lower        bool
	}{
		{"dynaina-netns", training.MetricAvgJCT, true},
		{"glitter-netns", farmem.MetricThroughput, false},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			spec, err := experiments.Open(tc.spec, nil)
			if err != nil {
				t.Fatal(err)
			}
			spec.Scenarios = spec.Scenarios[:1]
			exp, err := registry.Compile(spec)
			if err != nil {
				t.Fatal(err)
			}
			scenario := spec.Scenarios[0].Name
			results := map[string]*analysis.Results{}
			for _, network := range netnstb.Networks {
				ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
				f := netnstb.NewFactory(netnstb.Options{Network: network, RunIDPrefix: prefix})
				start := time.Now()
				res, err := experiments.Execute(ctx, spec, exp, experiments.Options{Parallel: 1, NewTestbed: f.New})
				f.Close()
				cancel()
				if err != nil {
					t.Fatalf("%s on %s: %v", tc.spec, network, err)
				}
				t.Logf("%s on %s: %v", tc.spec, network, time.Since(start).Round(time.Second))
				results[network] = res
			}
			value := func(network, policy string) float64 {
				return results[network].Aggregate(scenario, policy)[tc.metric].Mean
			}
			rank := func(network string) []string {
				p := slices.Clone(results[network].Policies)
				slices.SortStableFunc(p, func(x, y string) int {
					c := cmp.Compare(value(network, x), value(network, y))
					if !tc.lower {
						c = -c
					}
					return c
				})
				return p
			}
			t.Logf("%-9s %14s %14s %8s", "policy", tc.metric+" netns", "mininet", "ratio")
			for _, p := range results[netnstb.NetworkNetns].Policies {
				n, m := value(netnstb.NetworkNetns, p), value(netnstb.NetworkMininet, p)
				t.Logf("%-9s %14.4g %14.4g %8.3f", p, n, m, m/n)
				if math.Abs(m/n-1) > 0.10 {
					t.Errorf("%s: %s %.4g on Mininet is %+.1f%% off tracebed's bring-up (%.4g); want within 10%%", p, tc.metric, m, 100*(m/n-1), n)
				}
			}
			if a, b := rank(netnstb.NetworkNetns), rank(netnstb.NetworkMininet); !slices.Equal(a, b) {
				t.Errorf("policies rank %v with tracebed's bring-up, %v on Mininet", a, b)
			} else {
				t.Logf("rank on both: %v", a)
			}
		})
	}
}
