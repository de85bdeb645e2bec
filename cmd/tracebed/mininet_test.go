package main

import (
	"cmp"
	"context"
	"math"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tracebed/tracebed/analysis"
	"github.com/tracebed/tracebed/emulator/netns"
	"github.com/tracebed/tracebed/emulator/netns/lab"
	"github.com/tracebed/tracebed/emulator/netns/mininet"
	"github.com/tracebed/tracebed/emulator/testbed/netnstb"
	"github.com/tracebed/tracebed/experiments"
	"github.com/tracebed/tracebed/workloads/farmem"
	"github.com/tracebed/tracebed/workloads/training"
)

func needMininet(t *testing.T) {
	t.Helper()
	needRoot(t)
	if err := mininet.Available(); err != nil {
		t.Skipf("skipping: %v", err)
	}
}

// TestMininetCrossValidation runs the first scenario of dynaina-netns and
// of glitter-netns with tracebed's own bring-up and with Mininet building
// the network ('run --network mininet'): the policies must rank the same
// and each policy's headline metric (average JCT, throughput) must agree
// within 10%.
func TestMininetCrossValidation(t *testing.T) {
	needMininet(t)
	if testing.Short() {
		t.Skip("skipping in -short mode: about five minutes of real-time runs")
	}
	a, _, _ := pingApp()
	a.registry = experiments.NewRegistry(training.Kind{}, farmem.Kind{})
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
			spec, err := experiments.Open(tc.spec, a.readEmbedded)
			if err != nil {
				t.Fatal(err)
			}
			spec.Scenarios = spec.Scenarios[:1]
			exp, err := a.registry.Compile(spec)
			if err != nil {
				t.Fatal(err)
			}
			scenario := spec.Scenarios[0].Name
			results := map[string]*analysis.Results{}
			for _, network := range netnstb.Networks {
				ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
				f := netnstb.NewFactory(netnstb.Options{Network: network, RunIDPrefix: netnsPrefix})
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

// TestMininetCommand runs 'tracebed mininet' with pingall on a small star
// (exit 0, every ping answered), then kills a 'tracebed mininet' waiting
// in its CLI: Mininet tears its network down by itself (parent-death
// signal); and after SIGKILL of both tracebed and Mininet, 'tracebed
// cleanup' removes what is left.
func TestMininetCommand(t *testing.T) {
	needMininet(t)
	topo := smallStar(t)
	id := netns.TestRunID(netnsPrefix)
	defer lab.Remove(id)
	code, out := runTracebed(t, "mininet", topo, "--run-id", id, "--test", "pingall")
	if code != 0 || !strings.Contains(out, "*** Results: 0% dropped (6/6 received)") {
		t.Errorf("tracebed mininet --test pingall: exit %d\n%s", code, out)
	}
	if err := netns.CheckClean(id); err != nil {
		t.Error(err)
	}
	if code, out := runTracebed(t, "mininet", topo, "--run-id", "Bad"); code != exitBadInput {
		t.Errorf("tracebed mininet --run-id Bad: exit %d\n%s", code, out)
	}

	// SIGKILL of tracebed: Mininet's Python follows it (parent-death
	// signal) and tears down.
	up := func() (*syncBuffer, func()) {
		c := tracebed("mininet", topo, "--run-id", id)
		pr, pw, err := os.Pipe() // the CLI's input, never written
		if err != nil {
			t.Fatal(err)
		}
		c.Stdin = pr
		var o syncBuffer
		c.Stdout, c.Stderr = &o, &o
		// Mininet inherits the output pipe: do not wait for it forever.
		c.WaitDelay = 5 * time.Second
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		waitStateWithin(t, id, c, &o, 3*time.Minute)
		return &o, func() {
			c.Process.Signal(syscall.SIGKILL)
			c.Wait()
			pw.Close()
			pr.Close()
		}
	}
	o, kill := up()
	st := readState(t, id)
	kill()
	deadline := time.Now().Add(time.Minute)
	for netns.CheckClean(id) != nil && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if err := netns.CheckClean(id); err != nil {
		t.Errorf("after SIGKILL of tracebed mininet: %v\n%s", err, o)
	}
	for deadline := time.Now().Add(30 * time.Second); lab.Alive(st.PID, st.PIDStart) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	if lab.Alive(st.PID, st.PIDStart) {
		t.Errorf("Mininet's Python (pid %d) still runs", st.PID)
	}

	// SIGKILL of both (Mininet stopped first, so that it cannot tear
	// down when tracebed dies): cleanup removes the rest.
	_, kill = up()
	st = readState(t, id)
	syscall.Kill(st.PID, syscall.SIGSTOP)
	kill()
	syscall.Kill(st.PID, syscall.SIGKILL)
	for lab.Alive(st.PID, st.PIDStart) {
		time.Sleep(10 * time.Millisecond)
	}
	if err := netns.CheckClean(id); err == nil {
		t.Fatal("nothing left after SIGKILL: the test proves nothing")
	}
	if code, out := runTracebed(t, "cleanup", "--run", id); code != 0 || !strings.Contains(out, "removed run "+id) {
		t.Errorf("cleanup: exit %d\n%s", code, out)
	}
	if err := netns.CheckClean(id); err != nil {
		t.Error(err)
	}
}
