//go:build linux && !nonetns

package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/tracebed/tracebed/emulator/testbed"
	"github.com/tracebed/tracebed/emulator/testbed/netnstb"
	"github.com/tracebed/tracebed/p4/ina"
	"github.com/tracebed/tracebed/workloads/allreduce"
)

// allReduceValue is what worker w contributes at index i of its tensor in
// iteration it: numbers a student can add up in Wireshark (worker 0 sends
// 1000, 1001, …; worker 1 sends 2000, 2001, …).
func allReduceValue(w, it, i int) int32 { return int32(1000*(w+1) + i + it) }

func (a *app) topoAllReduceCommand() *cobra.Command {
	var run, sw string
	var hosts []string
	var spec allreduce.JobSpec
	var pool, job int
	var limit time.Duration
	cmd := &cobra.Command{
		Use:   "allreduce --hosts H1,H2,… [--pool N]",
		Short: "Run one INA all-reduce job on a topology that is up with --program ina (root)",
		Long: `Run one in-network aggregation job on a running topology whose switches run
the INA data plane ('tracebed topo up --program ina'): the aggregation
switch is programmed over P4Runtime (a pool of --pool aggregators, the job's
multicast group), one worker per host streams its tensor to the switch in
chunks of k = 64 int32 values (UDP port 48864), and the switch sends each
finished sum back to every worker. Worker w contributes 1000·(w+1) + i at
index i (plus the iteration number), so every value of a sum can be checked
by hand in a capture; every worker checks every sum. The job's switch state
is removed at the end.

It prints how long the all-reduce took, with its throughput, and the
retransmissions.`,
		Example: "  sudo tracebed topo up star --program ina --detach\n" +
			"  sudo tracebed topo allreduce --hosts h1,h2,h3,h4 --elements 256\n" +
			"  sudo tracebed topo allreduce --hosts h1,h2 --pool 8 --elements 65536",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if pool < 1 || job < 0 || job >= ina.MaxJobs || spec.Elements < 1 || spec.Iterations < 1 {
				return badInput(fmt.Errorf("want --pool ≥ 1, --job 0–%d, --elements ≥ 1, --iterations ≥ 1", ina.MaxJobs-1))
			}
			r, err := attach("topo allreduce", run)
			if err != nil {
				return err
			}
			a.warnDead(r)
			if r.State.Program != "ina" {
				return badInput(fmt.Errorf("the switches of run %s run %q: bring the topology up with --program ina", r.State.RunID, r.State.Program))
			}
			top := r.Topology()
			if len(hosts) == 0 {
				return badInput(errors.New("--hosts: name the workers' hosts, e.g. --hosts h1,h2,h3,h4"))
			}
			for _, h := range hosts {
				if n := top.Node(h); n == nil || !n.IsHost() {
					return badInput(fmt.Errorf("--hosts: %q is not a host of run %s", h, r.State.RunID))
				}
			}
			if sw == "" {
				sw = top.Node(hosts[0]).Uplink().Node.Name
				for _, h := range hosts[1:] {
					if top.Node(h).Uplink().Node.Name != sw {
						return badInput(errors.New("--switch: the hosts hang off different switches: name the aggregation switch"))
					}
				}
			} else if n := top.Node(sw); n == nil || n.IsHost() {
				return badInput(fmt.Errorf("--switch: %q is not a switch of run %s", sw, r.State.RunID))
			}
			if n := top.Node(sw); int(spec.Base)+pool > n.Aggregators {
				return badInput(fmt.Errorf("--pool %d from --base %d: switch %s has %d aggregators", pool, spec.Base, sw, n.Aggregators))
			}
			ctx := cmd.Context()
			sockets := map[string]string{}
			var dev uint64 = 1
			for name, s := range r.State.Switches {
				sockets[name] = s.Socket
				if s.DeviceID != 0 {
					dev = s.DeviceID
				}
			}
			prog, err := ina.SwitchProgram()
			if err != nil {
				return err
			}
			tb, err := netnstb.Open(ctx, testbed.Config{Topology: top, Program: &prog, Seed: 1}, r.Net, sockets, dev)
			if err != nil {
				return err
			}
			defer tb.Close()
			n := len(hosts)
			spec.ID, spec.Mode, spec.Hosts, spec.Switch, spec.Size = uint16(job), allreduce.ModeINA, hosts, sw, uint32(pool)
			// A binding generation of its own: the aggregators keep the
			// chunks of earlier runs, which must never pass for this
			// run's (a generation is unique on the switch).
			spec.Gen = uint32(time.Now().UnixNano()>>10) | 1
			spec.Fill = func(w, it int, t []int32) {
				for i := range t {
					t[i] = allReduceValue(w, it, i)
				}
			}
			spec.Check = func(_, it int, t []int32) error {
				for i := range t {
					var want int32
					for w := range n {
						want += allReduceValue(w, it, i)
					}
					if t[i] != want {
						return fmt.Errorf("value %d of iteration %d is %d, want %d", i, it, t[i], want)
					}
				}
				return nil
			}
			// What a run of the same job killed before its end may have
			// left on the switch goes first (best effort: none, usually).
			clearJob(ctx, tb, sw, uint16(job), ina.MaxWorkers)
			j, err := allreduce.SetupOn(tb, spec)
			if err != nil {
				return badInput(err)
			}
			// The switch state of the job goes at the end, before the
			// testbed's clients close.
			defer clearJob(ctx, tb, sw, uint16(job), n)
			fmt.Fprintf(a.stdout, "job %d: %d workers (%v) through %s, a pool of %d aggregators [%d, %d), %d values (%d chunks of k = %d) × %d iteration(s)\n",
				j.Spec.ID, n, hosts, sw, pool, spec.Base, int(spec.Base)+pool, spec.Elements, (spec.Elements+j.Spec.K-1)/j.Spec.K, j.Spec.K, spec.Iterations)
			fmt.Fprintf(a.stdout, "  workers send from UDP port %d to %s:%d; worker w sends 1000·(w+1) + index (+ iteration)\n",
				j.Spec.Port, top.Node(sw).IP, ina.Port)
			if err := tb.Run(ctx, 2*time.Millisecond, limit, j.Poll); err != nil {
				return fmt.Errorf("all-reduce: %w", err)
			}
			clearJob(ctx, tb, sw, uint16(job), n)
			tb.Close()
			if j.Err != nil {
				return fmt.Errorf("all-reduce: %w", j.Err)
			}
			st := j.Stats()
			bits := float64(4*spec.Elements*spec.Iterations) * 8
			fmt.Fprintf(a.stdout, "  all-reduce time %v (mean over the workers; %.2f Mbit/s of gradient each), %d retransmissions; every worker got every sum exact\n",
				st.CommTime.Round(10*time.Microsecond), bits/st.CommTime.Seconds()/1e6, st.Retransmits)
			var sum0 int32
			for w := range n {
				sum0 += allReduceValue(w, 0, 0)
			}
			fmt.Fprintf(a.stdout, "  the first sum (offset 0, value 0): %d = %d + … + %d\n", sum0, allReduceValue(0, 0, 0), allReduceValue(n-1, 0, 0))
			return nil
		},
	}
	fl := cmd.Flags()
	addRunFlag(cmd, &run)
	fl.StringSliceVar(&hosts, "hosts", nil, "the workers' hosts, one worker each")
	fl.StringVar(&sw, "switch", "", "aggregation switch (default: the switch the hosts hang off)")
	fl.IntVar(&job, "job", 1, "job id")
	fl.IntVar(&pool, "pool", 64, "aggregators the job's pool holds (its window, in chunks)")
	fl.Uint32Var(&spec.Base, "base", 0, "first aggregator of the pool")
	fl.IntVar(&spec.Elements, "elements", 64*64, "int32 values in each worker's tensor")
	fl.IntVar(&spec.Iterations, "iterations", 1, "all-reduce iterations")
	fl.DurationVar(&spec.Compute, "compute", 0, "compute time before each iteration")
	fl.DurationVar(&spec.Delay, "start-delay", 100*time.Millisecond, "wait this long before the first iteration (every worker is listening by then)")
	fl.DurationVar(&spec.Timeout, "timeout", 100*time.Millisecond, "retransmission timeout")
	fl.DurationVar(&limit, "limit", 2*time.Minute, "give up after this long")
	return cmd
}

// clearJob removes job's binding and multicast group (of up to n members)
// from switch sw, best effort: what is not there is not an error.
func clearJob(ctx context.Context, tb *netnstb.Testbed, sw string, job uint16, n int) {
	c, err := tb.Switch(sw)
	if err != nil {
		return
	}
	ctl, err := ina.NewController(c)
	if err != nil {
		return
	}
	ctx = context.WithoutCancel(ctx)
	ctl.Unbind(ctx, job)
	ctl.DeleteGroup(ctx, job+1, n) // allreduce's group: job id + 1
}
