//go:build linux && !nonetns

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/tracebed/tracebed/emulator/bmv2"
	"github.com/tracebed/tracebed/emulator/netns"
	"github.com/tracebed/tracebed/emulator/netns/lab"
	"github.com/tracebed/tracebed/emulator/netns/mininet"
	"github.com/tracebed/tracebed/emulator/testbed"
	"github.com/tracebed/tracebed/experiments"
	"github.com/tracebed/tracebed/topologies"
)

// networkOf returns the network a spec's runs build on netns: the
// topology and program of its first run's testbed (first policy, first
// scenario, first seed).
func (a *app) networkOf(ctx context.Context, spec *experiments.Spec) (*topologies.Topology, string, error) {
	exp, err := a.registry.Compile(spec)
	if err != nil {
		return nil, "", badInput(err)
	}
	scenario := "default"
	if len(spec.Scenarios) > 0 {
		scenario = spec.Scenarios[0].Name
	}
	var cfg *testbed.Config
	errCaptured := errors.New("captured")
	_, err = exp.Run(ctx, experiments.Run{Policy: spec.Policies[0].Name, Scenario: scenario, Seed: spec.Seeds[0],
		Substrate: "netns", Scale: spec.Scale, Progress: func(float64) {},
		NewTestbed: func(_ context.Context, c testbed.Config) (testbed.Testbed, error) {
			cfg = &c
			return nil, errCaptured
		}})
	if cfg == nil {
		if err == nil {
			err = errors.New("it finished without one")
		}
		return nil, "", badInput(fmt.Errorf("%s: its runs build no network to bring up (%v)", spec.File, err))
	}
	program := "fwd"
	if cfg.Program != nil {
		program = cfg.Program.Name
	}
	return cfg.Topology, program, nil
}

func (a *app) mininetCommand() *cobra.Command {
	var opts mininet.Options
	var sw string
	var bopts bmv2.Options
	cmd := &cobra.Command{
		Use:   "mininet TOPOLOGY|SPEC",
		Short: "Bring a topology up with Mininet and hand over Mininet's CLI (root)",
		Long: `Bring a topology up with Mininet (the script 'tracebed topo export --format
mininet' writes, with tracebed's Mininet classes): hosts addressed as 'topo up'
addresses them, a Go switch (or, with --switch bmv2, simple_switch_grpc
loaded over P4Runtime from here) in each switch's namespace, HTB on the host
links. Then Mininet's CLI ('h1 ping h2', 'pingall', 'link tor h1 down',
'xterm h1'), or --test pingall, or the commands of --script. The run is a
tracebed run too: 'tracebed topo cli|exec|capture|status' work on it from
another terminal. Leaving the CLI, Ctrl-C at startup, SIGTERM or the end of
this process tears everything down; 'tracebed cleanup' removes what a
killed run left.

With a SPEC, the network its first run builds on netns: the scaled
topology and the spec's data plane.

Needs Mininet ('apt-get install mininet') and the Python it was installed
for (Debian: /usr/bin/python3; set TRACEBED_PYTHON otherwise).`,
		Example: "  sudo tracebed mininet star\n" +
			"  sudo tracebed mininet leafspine --test pingall\n" +
			"  sudo tracebed mininet dynaina-netns            # the spec's star, switches running ina\n" +
			"  sudo tracebed mininet star --switch bmv2 --program fwd",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.RunID != "" {
				if err := netns.ValidRunID(opts.RunID); err != nil {
					return badInput(fmt.Errorf("--run-id: %w", err))
				}
			}
			switch sw {
			case "go":
				opts.Switch = mininet.SwitchGo
			case "bmv2":
				opts.Switch = mininet.SwitchBMv2
			default:
				return badInput(fmt.Errorf("--switch %q: want go or bmv2", sw))
			}
			if opts.Test != "" && opts.Test != "pingall" {
				return badInput(fmt.Errorf("--test %q: want pingall", opts.Test))
			}
			ctx := cmd.Context()
			top, _, terr := readTopologyArg(args[0])
			if terr != nil {
				spec, err := experiments.Open(args[0], a.readEmbedded)
				if err != nil {
					return badInput(fmt.Errorf("%s is neither a topology nor an experiment spec: %v; %v", args[0], terr, err))
				}
				var program string
				if top, program, err = a.networkOf(ctx, spec); err != nil {
					return err
				}
				if !cmd.Flags().Changed("program") {
					opts.Program = program
				}
			}
			if err := requireRoot("mininet"); err != nil {
				return err
			}
			if err := mininet.Available(); err != nil {
				return badInput(err)
			}
			if opts.Switch == mininet.SwitchBMv2 {
				tools, err := bmv2.FindTools(bopts)
				if err != nil {
					return badInput(err)
				}
				opts.SimpleSwitch = tools.Switch
			}
			opts.Stdin, opts.Stdout, opts.Stderr = os.Stdin, a.stdout, a.stderr
			// Ctrl-C reaches Mininet (same process group) and its CLI
			// handles it; SIGTERM tears down.
			term := make(chan os.Signal, 1)
			signal.Notify(term, syscall.SIGTERM)
			defer signal.Stop(term)
			p, err := mininet.Start(context.WithoutCancel(ctx), top, opts)
			if errors.Is(err, netns.ErrRunInUse) {
				return badInput(err)
			}
			if err != nil {
				return err
			}
			defer p.Stop()
			if opts.Switch == mininet.SwitchBMv2 {
				r, err := lab.Attach(p.RunID)
				if err != nil {
					return err
				}
				sockets := map[string]string{}
				for name, s := range r.State.Switches {
					sockets[name] = s.Socket
				}
				reg, err := a.programs()
				if err != nil {
					return err
				}
				prog, err := lab.Lookup(reg, opts.Program)
				if err != nil {
					return labErr(err)
				}
				if err := lab.LoadBMv2(ctx, top, sockets, prog, bopts); err != nil {
					return labErr(err)
				}
			}
			if err := p.Continue(); err != nil {
				return err
			}
			select {
			case <-p.Exited():
			case <-term:
				fmt.Fprintln(a.stderr, "tracebed: SIGTERM: tearing the Mininet network down")
			}
			err = p.Stop()
			if werr := p.Wait(); werr != nil {
				var ee *exec.ExitError
				if errors.As(werr, &ee) && ee.ExitCode() > 0 {
					return exitCode(ee.ExitCode())
				}
				return fmt.Errorf("mininet: %w", werr)
			}
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.RunID, "run-id", "", "name the run (1–6 lowercase letters or digits; default random)")
	fl.StringVar(&sw, "switch", "go", "switch class: go (TracebedSwitch, the Go switch) or bmv2 (BMv2Switch, simple_switch_grpc)")
	fl.StringVar(&opts.Program, "program", "fwd", "data plane the switches run (default: the spec's, or fwd)")
	fl.Uint64Var(&opts.Seed, "seed", 1, "seed of the switches' loss, duplication and reordering")
	fl.IntVar(&opts.MTU, "mtu", 0, "MTU of every link (576–9000; default 1500)")
	fl.BoolVar(&opts.NoShaping, "no-shaping", false, "do not shape host links with HTB")
	fl.StringVar(&opts.Test, "test", "", "run a test instead of the CLI: pingall (exit 1 on a lost ping)")
	fl.StringVar(&opts.Script, "script", "", "run these Mininet CLI commands instead of the CLI")
	fl.StringVar(&bopts.LogLevel, "bmv2-log-level", "", "simple_switch_grpc's --log-level (default warn)")
	return cmd
}
