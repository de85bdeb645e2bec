package main

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tracebed/tracebed/emulator/testbed/netnstb"
	"github.com/tracebed/tracebed/experiments"
)

func (a *app) runCommand() *cobra.Command {
	var (
		substrate string
		switchArg string
		switchIO  string
		network   string
		realtime  int
		out       string
		seed      int64
		quiet     bool
		parallel  int
		plots     bool
		shardArg  string
		format    *formatFlag
		pcapDir   string
		pcapPorts []string
		scale     float64
		limits    = experiments.DefaultLimits
	)
	cmd := &cobra.Command{
		Use:   "run [flags] [SPEC...]",
		Short: "Run experiments and print their comparison tables",
		Long: `Run each SPEC — a spec file, or the name of a ready experiment such as
"incast" — for every policy, scenario and seed, in parallel across cores.
Without SPEC, run the default suite (the ready specs marked default: true);
with --substrate netns and no SPEC, run the ready specs written for netns
(substrate: netns), the cross-validation scenarios.

Results go to OUT/<experiment>/: results.json, results.csv, results.md,
the figures (PNG and SVG, their data in figures.json) and provenance.json
(the command, the machine, the wall time). 'tracebed report OUT' gathers
them into one Markdown report.

With --shard I/N, run only the I-th of N parts of each spec's runs, split
by their estimated cost, and write OUT/<experiment>/shard-I-of-N.json;
'tracebed merge' joins the N shards into the results an unsharded run
writes, byte for byte (docs/scale-out.md).`,
		Example: "  tracebed run\n  tracebed run experiments/incast.yaml --seed 7\n  tracebed run --out /tmp/r incast\n  sudo tracebed run --substrate netns SPEC\n  sudo tracebed run --substrate netns --switch bmv2 SPEC\n  sudo tracebed run --substrate netns --network mininet SPEC\n  tracebed run --shard 2/8 --out /data/shards dynaina-sweep",
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("substrate") && !slices.Contains(experiments.Substrates, substrate) {
				return badInput(fmt.Errorf("--substrate %q: want one of %s", substrate, strings.Join(experiments.Substrates, ", ")))
			}
			var specs []*experiments.Spec
			var err error
			if len(args) == 0 && substrate == "netns" {
				specs, err = experiments.Suite("netns", a.readEmbedded)
				if err != nil {
					return badInput(err)
				}
			} else if specs, err = a.loadSpecs(args); err != nil {
				return err
			}
			var shard experiments.Shard
			if shardArg != "" {
				if shard, err = experiments.ParseShard(shardArg); err != nil {
					return badInput(fmt.Errorf("--shard: %w", err))
				}
				if !cmd.Flags().Changed("out") {
					out = defaultShardOut
				}
			}
			captured, err := parsePcapPorts(pcapPorts)
			if err != nil {
				return badInput(err)
			}
			if !slices.Contains(netnstb.Switches, switchArg) {
				return badInput(fmt.Errorf("--switch %q: want one of %s", switchArg, strings.Join(netnstb.Switches, ", ")))
			}
			type compiled struct {
				spec *experiments.Spec
				exp  experiments.Experiment
			}
			var todo []compiled
			for _, s := range specs {
				if cmd.Flags().Changed("substrate") {
					s.Substrate = substrate
				}
				if cmd.Flags().Changed("seed") {
					s.Seeds = []int64{seed}
				}
				switch {
				case cmd.Flags().Changed("scale"):
					if !(scale >= 1 && scale <= experiments.MaxScale) {
						return badInput(fmt.Errorf("--scale %g: want 1 to %g", scale, float64(experiments.MaxScale)))
					}
					s.Scale = scale
				case switchArg == netnstb.SwitchBMv2 && s.Substrate == "netns":
					if b := s.AtBMv2Scale(); b != s {
						fmt.Fprintf(a.stderr, "%s: on bmv2 at scale %g, its bmv2_scale (--scale overrides)\n", s.Name, b.Scale)
						s = b
					}
				}
				s.SetContext(cmd.Context())
				exp, err := a.registry.Compile(s)
				if err != nil && cmd.Context().Err() != nil {
					return fmt.Errorf("%s: %w", s.Name, context.Cause(cmd.Context())) // interrupted, not bad input
				}
				if err != nil {
					return badInput(err)
				}
				if err := experiments.CheckLimits(s, exp, limits); err != nil {
					return badInput(err)
				}
				if err := rehearse(cmd.Context(), a.stderr, quiet, s.Name, exp); err != nil {
					if cmd.Context().Err() != nil {
						return fmt.Errorf("%s: %w", s.Name, context.Cause(cmd.Context()))
					}
					return badInput(err)
				}
				todo = append(todo, compiled{s, exp})
			}
			if !slices.Contains(netnstb.Networks, network) {
				return badInput(fmt.Errorf("--network %q: want one of %s", network, strings.Join(netnstb.Networks, ", ")))
			}
			tbOpts := netnstb.Options{Switch: switchArg, Network: network, RunIDPrefix: a.netnsRunPrefix, SwitchIO: switchIO}
			for _, c := range todo {
				if c.spec.Substrate != "netns" {
					continue
				}
				// Before anything runs: root, and the bmv2 tools.
				if err := netnstb.Check(tbOpts); err != nil {
					return badInput(fmt.Errorf("%s: %w", c.spec.Name, err))
				}
			}
			if realtime > 0 && slices.ContainsFunc(todo, func(c compiled) bool { return c.spec.Substrate == "netns" }) {
				restore, err := netnstb.Realtime(realtime)
				if err != nil {
					return badInput(fmt.Errorf("--realtime: %w", err))
				}
				defer restore()
			}
			if os.Getenv("GOMEMLIMIT") == "" && limits.Memory > 0 {
				// The runs under way are estimated to need at most
				// --max-memory together: the collector works to keep
				// the process near it (a soft limit; docs/reliability.md).
				defer debug.SetMemoryLimit(debug.SetMemoryLimit(int64(limits.Memory) + runtimeSlack))
			}
			for _, c := range todo {
				start := time.Now()
				bar := newProgress(a.stderr, quiet, c.spec.Name)
				opts := experiments.Options{Parallel: parallel, Version: version, Commit: buildCommit(), Progress: bar, Shard: shard, Memory: int64(limits.Memory)}
				if pcapDir != "" {
					opts.Capture = pcapCapture(pcapDir, c.spec.Name, captured)
				}
				var testbeds *netnstb.Factory
				if c.spec.Substrate == "netns" {
					// Real time: one run at a time keeps the cores for
					// the switches and agents of that run.
					opts.Parallel = 1
					testbeds = netnstb.NewFactory(tbOpts)
					opts.NewTestbed = testbeds.New
				}
				res, err := experiments.Execute(cmd.Context(), c.spec, c.exp, opts)
				if testbeds != nil {
					// Whatever the runs did, nothing stays up.
					if cerr := testbeds.Close(); cerr != nil && err == nil {
						err = cerr
					}
				}
				bar.finish()
				wall := time.Since(start)
				info := runInfo{start: start, wall: wall, parallel: cmp.Or(max(parallel, 0), runtime.GOMAXPROCS(0))}
				if err != nil {
					if res != nil && res.Partial != nil && shard.Count == 0 {
						// Interrupted: the runs that finished are
						// written, marked partial, without figures
						// (they take time; 'tracebed report' draws
						// them).
						if dir, werr := a.writePartial(out, c.exp, res, info); werr == nil {
							err = fmt.Errorf("%w; the %d finished runs are in %s, marked partial", err, res.Partial.Done, dir)
						}
					}
					if c.spec.Substrate == "netns" && cmd.Context().Err() != nil {
						err = fmt.Errorf("%w (the runs' testbeds were torn down)", err)
					}
					return err
				}
				if shard.Count > 0 {
					if err := a.writeShard(out, c.spec, c.exp, shard, res, info, quiet); err != nil {
						return err
					}
					continue
				}
				tables := experiments.Tables(c.exp, res)
				dir, err := experiments.Write(out, res, tables)
				if err != nil {
					return err
				}
				if err := a.writeArtifacts(dir, res, info, plots); err != nil {
					return err
				}
				if err := printResults(a.stdout, format.value, res, tables); err != nil {
					return err
				}
				if !quiet {
					fmt.Fprintf(a.stderr, "%s: %d runs in %.1fs; results in %s\n", c.spec.Name, len(res.Runs), time.Since(start).Seconds(), dir)
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&substrate, "substrate", "sim", "substrate to run on: sim or netns (overrides the spec; netns needs root and runs one run at a time)")
	f.IntVar(&realtime, "realtime", 0, "netns: run the emulation (this process and its switches) at SCHED_RR with this priority, 1–99, so other work on the machine does not delay it (real-time runs on one machine take turns); 0 = normal priority")
	f.StringVar(&switchArg, "switch", netnstb.SwitchGo, "switch of the netns substrate: go (the Go switch) or bmv2 (simple_switch_grpc and p4c-bm2-ss on PATH)")
	f.StringVar(&switchIO, "switch-io", "auto", "netns: the Go switches' port sockets: auto (today afpacket: the least kernel work per frame on veths), afpacket (AF_PACKET receive rings; captures on switch interfaces see every frame) or xdp (AF_XDP)")
	f.StringVar(&network, "network", netnstb.NetworkNetns, "who builds the netns substrate's network: netns (tracebed) or mininet (Mininet, with tracebed's classes; apt-get install mininet)")
	f.Float64Var(&scale, "scale", 0, "run at this scale factor instead of the spec's: rates, volumes and memory divided by it (docs/scaling.md); default: the spec's scale, or its bmv2_scale on netns with --switch bmv2")
	f.StringVar(&out, "out", "results", "directory for results")
	f.Int64Var(&seed, "seed", 1, "run this one seed instead of the spec's seeds")
	f.BoolVarP(&quiet, "quiet", "q", false, "no progress bar or summary lines on stderr")
	f.IntVar(&parallel, "parallel", runtime.GOMAXPROCS(0), "runs executed at once")
	f.BoolVar(&plots, "plots", true, "write the figures (PNG, SVG) next to the results")
	f.StringVar(&shardArg, "shard", "", "run only shard I/N of each spec's runs (0 ≤ I < N, balanced by estimated cost), writing OUT/<experiment>/shard-I-of-N.json (OUT defaults to "+defaultShardOut+"); join the shards with 'tracebed merge'")
	f.StringVar(&pcapDir, "pcap", "", "write pcapng captures of every run's testbed into this directory: every switch port, or the --pcap-port ones")
	f.StringSliceVar(&pcapPorts, "pcap-port", nil, "NODE:PORT to capture with --pcap (repeatable, e.g. tor:1)")
	format = addFormatFlag(f, formatTable, "what to print on stdout: the comparison tables, or the runs as CSV, or results.json")
	addLimitFlags(f, &limits)
	return cmd
}

// runtimeSlack is what the process holds besides its runs' estimates,
// in the Go memory limit 'tracebed run' sets: the runtime, the binary's
// data, the results and figures being written.
const runtimeSlack = 256 << 20

// loadSpecs opens the named specs, or the default suite when none is named.
// (Without a spec, 'run --substrate netns' runs the netns suite instead.)
func (a *app) loadSpecs(args []string) ([]*experiments.Spec, error) {
	if len(args) == 0 {
		specs, err := experiments.DefaultSuite(a.readEmbedded)
		if err != nil {
			return nil, badInput(err)
		}
		return specs, nil
	}
	var specs []*experiments.Spec
	for _, arg := range args {
		s, err := experiments.Open(arg, a.readEmbedded)
		if err != nil {
			return nil, badInput(err)
		}
		specs = append(specs, s)
	}
	return specs, nil
}

func (a *app) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print tracebed's version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, args []string) {
			c := buildCommit()
			if c == "" {
				c = "unknown"
			}
			fmt.Fprintf(a.stdout, "tracebed %s (commit %s, %s, %s/%s)\n", version, c, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		},
	}
}
