//go:build linux && !nonetns

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tracebed/tracebed/emulator/netns"
	"github.com/tracebed/tracebed/emulator/netns/lab"
	goswitch "github.com/tracebed/tracebed/emulator/switch"
)

// labErr turns the input errors of package lab into the command's (exit
// code 2).
func labErr(err error) error {
	var ie lab.InputError
	if errors.As(err, &ie) {
		return badInput(err)
	}
	return err
}

// requireRoot refuses a command that works on network namespaces without
// root (exit code 2, as 'run --substrate netns' does).
func requireRoot(what string) error {
	if os.Geteuid() != 0 {
		return badInput(fmt.Errorf("%s needs root (network namespaces): run it with sudo", what))
	}
	return nil
}

// attach finds a run for the lifecycle commands: run id, or the only run.
func attach(what, run string) (*lab.Run, error) {
	if err := requireRoot(what); err != nil {
		return nil, err
	}
	r, err := lab.Attach(run)
	return r, labErr(err)
}

// addRunFlag adds --run, the run a lifecycle command works on.
func addRunFlag(cmd *cobra.Command, run *string) {
	cmd.Flags().StringVar(run, "run", "", "run id (default: the only topology up)")
}

// warnDead prints on stderr the switch processes of r that have died.
func (a *app) warnDead(r *lab.Run) {
	for _, s := range r.Status() {
		if !s.Alive {
			fmt.Fprintf(a.stderr, "tracebed: warning: %s\n", s)
		}
	}
}

func (a *app) topoUpCommand() *cobra.Command {
	var opts lab.Options
	var spin, switchIO string
	var detach bool
	cmd := &cobra.Command{
		Use:   "up TOPOLOGY",
		Short: "Bring a topology up in network namespaces with Go switches (root)",
		Long: `Bring a topology up on the real network stack: a network namespace per host
and switch, veth links, addresses, routes and static neighbour entries, host
links shaped with HTB, and a Go switch ('tracebed switch') in every switch
namespace with a P4Runtime server on a Unix socket. Link delay and loss are
applied by the switches. With --switch bmv2, bmv2's simple_switch_grpc runs
the program instead, loaded over P4Runtime.

It stays in the foreground until Ctrl-C, then tears everything down; with
--detach it returns and leaves the topology up until 'tracebed topo down'.
A watchdog reports a switch process that dies (on stderr, and in 'tracebed
topo status'); the topology stays up and the switch's log is kept in
` + lab.KeptLogDir + `.

A run id in use is refused before anything is created.`,
		Example: "  sudo tracebed topo up star\n  sudo tracebed topo up leafspine --detach && sudo tracebed topo exec h1 -- ping -c3 10.0.0.16",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			top, data, err := readTopologyArg(args[0])
			if err != nil {
				return err
			}
			if spin != "" {
				if opts.Spin, err = time.ParseDuration(spin); err != nil {
					return badInput(fmt.Errorf("--spin: %w", err))
				}
			}
			if opts.SwitchIO, err = goswitch.ParseIOMode(switchIO); err != nil {
				return badInput(fmt.Errorf("--switch-io: %w", err))
			}
			if opts.Net.RunID != "" {
				if err := netns.ValidRunID(opts.Net.RunID); err != nil {
					return badInput(fmt.Errorf("--run-id: %w", err))
				}
			}
			if opts.Programs, err = a.programs(); err != nil {
				return err
			}
			if err := requireRoot("topo up"); err != nil {
				return err
			}
			opts.Detach = detach
			ctx := cmd.Context()
			r, err := lab.Up(ctx, top, data, opts)
			if errors.Is(err, netns.ErrRunInUse) {
				return badInput(err)
			}
			if err != nil {
				return labErr(err)
			}
			a.printReach(r)
			if detach {
				return nil
			}
			fmt.Fprintln(a.stdout, "\nPress Ctrl-C to tear the topology down.")
			watch, stopWatch := context.WithCancel(ctx)
			go r.Watch(watch, 0, func(s lab.SwitchStatus) {
				fmt.Fprintf(a.stderr, "tracebed: %s; the topology stays up ('tracebed topo status'; Ctrl-C tears it down)\n%s\n", s, indent(s.LogTail))
			})
			<-ctx.Done()
			stopWatch()
			fmt.Fprintln(a.stdout, "\ntearing down", r.State.RunID)
			r.StopSwitches()
			a.printCounters(r)
			kept, err := r.Down()
			for _, k := range kept {
				fmt.Fprintf(a.stderr, "the log of a switch that died is kept: %s\n", k)
			}
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Net.RunID, "run-id", "", "name the run (1–6 lowercase letters or digits; default random)")
	fl.BoolVar(&opts.Net.Bridge, "bridge", false, "forward with Linux bridges instead of Go switches (loop-free topologies only)")
	fl.BoolVar(&opts.Net.NoShaping, "no-shaping", false, "do not shape host links with HTB")
	fl.StringVar(&opts.Switch, "switch", lab.SwitchGo, "switch process: go (the Go switch) or bmv2 (simple_switch_grpc, p4c-bm2-ss)")
	fl.StringVar(&opts.Program, "program", "fwd", "data plane the switches run")
	fl.Uint64Var(&opts.Seed, "seed", 1, "seed of the switches' loss, duplication and reordering")
	fl.StringVar(&spin, "spin", "", "switches busy-poll for timed events this close (e.g. 200us): precise timing, busy cores")
	fl.StringVar(&switchIO, "switch-io", string(goswitch.IOAuto), "Go switches' port sockets: auto (today afpacket: the least kernel work per frame on veths), afpacket (AF_PACKET receive rings; captures on switch interfaces see every frame) or xdp (AF_XDP)")
	fl.BoolVar(&detach, "detach", false, "return once the topology is up and leave it running")
	return cmd
}

func indent(s string) string {
	if s == "" {
		return ""
	}
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}

func (a *app) printReach(r *lab.Run) {
	w, n, st := a.stdout, r.Net, r.State
	fmt.Fprintf(w, "%s is up as run %s (%s)\n\n", n.Topology.Summary(), n.RunID, time.Since(st.Started).Round(time.Millisecond))
	fmt.Fprintf(w, "%-10s %-6s %-15s %s\n", "NODE", "KIND", "ADDRESS", "NAMESPACE")
	for _, node := range n.Topology.Nodes {
		fmt.Fprintf(w, "%-10s %-6s %-15s %s\n", node.Name, node.Kind, node.IP, n.Namespace(node.Name))
	}
	hosts := n.Topology.Hosts()
	h1, h2 := hosts[0], hosts[len(hosts)-1]
	fmt.Fprintln(w, "\nReach it:")
	fmt.Fprintf(w, "  tracebed topo exec %s -- ping -c3 %s\n", h1.Name, h2.IP)
	fmt.Fprintf(w, "  tracebed topo exec %s -- bash            # a shell on %s\n", h1.Name, h1.Name)
	fmt.Fprintf(w, "  tracebed topo cli                        # Mininet-style: %s ping %s, pingall, link, counters\n", h1.Name, h2.Name)
	fmt.Fprintf(w, "  ip netns exec %s ip addr\n", n.Namespace(h1.Name))
	if sw := n.Topology.Switches(); len(sw) > 0 {
		fmt.Fprintf(w, "  tracebed topo capture %s:1 -w %s-1.pcapng   # then: tshark -r %s-1.pcapng\n", sw[0].Name, sw[0].Name, sw[0].Name)
	}
	if len(st.Switches) > 0 {
		fmt.Fprintf(w, "\nP4Runtime (device id 1, gRPC over Unix sockets; %s switches running %s):\n", st.Switch, st.Program)
		for _, sw := range n.Topology.Switches() {
			fmt.Fprintf(w, "  %-10s unix://%s\n", sw.Name, st.Switches[sw.Name].Socket)
		}
	}
	fmt.Fprintf(w, "\nTear down: tracebed topo down --run %s   (or tracebed cleanup)\n", n.RunID)
}

// printCounters prints the port counters the switches logged as they
// stopped (ports that saw traffic only), before the run directory goes.
func (a *app) printCounters(r *lab.Run) {
	for _, sw := range r.Net.Topology.Switches() {
		data, err := os.ReadFile(r.State.Switches[sw.Name].Log)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(line, "port ") && !strings.Contains(line, "rx 0 frames, tx 0,") {
				fmt.Fprintf(a.stdout, "%s %s\n", sw.Name, line)
			}
		}
	}
}

func (a *app) topoExecCommand() *cobra.Command {
	var run string
	cmd := &cobra.Command{
		Use:   "exec NODE -- COMMAND [ARG…]",
		Short: "Run a command inside a node's namespace (root)",
		Long: `Run a command inside a node's network namespace, with this terminal. The
exit status is the command's.`,
		Example: "  tracebed topo exec h1 -- ping -c3 10.0.0.2\n" +
			"  tracebed topo exec h2 -- iperf3 -s",
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := attach("topo exec", run)
			if err != nil {
				return err
			}
			a.warnDead(r)
			c := exec.Command(args[1], args[2:]...)
			c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
			if err := r.Exec(args[0], c); err != nil {
				return labErr(err)
			}
			// Ctrl-C goes to the command (same terminal process group);
			// we only wait for it.
			err = c.Wait()
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				return exitCode(ee.ExitCode())
			}
			return err
		},
	}
	addRunFlag(cmd, &run)
	return cmd
}

func (a *app) topoCaptureCommand() *cobra.Command {
	var run, out string
	var opts netns.CaptureOptions
	cmd := &cobra.Command{
		Use:   "capture NODE:PORT -w FILE.pcapng",
		Short: "Capture a port's frames, both directions, as pcapng (root)",
		Long: `Capture every frame received and sent on one port as pcapng, readable by
Wireshark and tshark (wireshark/tracebed.lua decodes the INA and far-memory
headers). PORT is a port number (as in 'tracebed topo show') or an
interface name. Stops on Ctrl-C, or after --count frames or --duration.`,
		Example: "  tracebed topo capture tor:1 -w tor-1.pcapng --duration 10s\n  tshark -r tor-1.pcapng",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return badInput(errors.New("-w FILE is required"))
			}
			r, err := attach("topo capture", run)
			if err != nil {
				return err
			}
			if _, _, err := r.Port(args[0]); err != nil {
				return labErr(err)
			}
			f, err := os.Create(out)
			if err != nil {
				return err
			}
			defer f.Close()
			fmt.Fprintf(a.stderr, "capturing %s to %s (Ctrl-C to stop)\n", args[0], out)
			count, err := r.Capture(cmd.Context(), args[0], f, opts)
			fmt.Fprintf(a.stderr, "%d frames captured\n", count)
			if err != nil {
				return labErr(err)
			}
			return f.Close()
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&out, "write", "w", "", "pcapng file to write")
	addRunFlag(cmd, &run)
	fl.IntVarP(&opts.Count, "count", "c", 0, "stop after this many frames")
	fl.DurationVar(&opts.Duration, "duration", 0, "stop after this long")
	return cmd
}

func (a *app) topoDownCommand() *cobra.Command {
	var run string
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Tear a topology down: switches, namespaces, links (root)",
		Long: `Tear a topology down: the process that brought it up is asked to stop, the
switch processes stop (their logs end with their counters), and the
namespaces, links and run directory are removed. The log of a switch that
had died is kept in ` + lab.KeptLogDir + `.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := attach("topo down", run)
			if err != nil {
				return err
			}
			kept, err := r.Down()
			for _, k := range kept {
				fmt.Fprintf(a.stderr, "a switch of run %s had died; its log is kept: %s\n", r.State.RunID, k)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "run %s (%s) is down\n", r.State.RunID, r.State.Name)
			return nil
		},
	}
	addRunFlag(cmd, &run)
	return cmd
}

func (a *app) topoStatusCommand() *cobra.Command {
	var run string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "List the topologies that are up and their switch processes (root)",
		Long: `List the topologies that are up (or left behind by a killed run) and, for
each, who built it, its program and whether each switch process is running.
A switch process that died is reported with the end of its log. Exits 1 if
one has died.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := requireRoot("topo status"); err != nil {
				return err
			}
			ids := []string{run}
			if run == "" {
				var err error
				if ids, err = lab.Runs(); err != nil {
					return err
				}
				if len(ids) == 0 {
					fmt.Fprintln(a.stdout, "no topology is up")
					return nil
				}
			}
			dead := 0
			for _, id := range ids {
				r, err := lab.Attach(id)
				if err != nil {
					if run != "" {
						return labErr(err)
					}
					fmt.Fprintf(a.stdout, "run %s: %v\n", id, err)
					continue
				}
				st := r.State
				fmt.Fprintf(a.stdout, "run %s: %s, up since %s, built by %s, %s switches running %s, owner pid %d\n",
					id, st.Name, st.Started.Format(time.DateTime), st.Network, st.Switch, st.Program, st.PID)
				for _, s := range r.Status() {
					fmt.Fprintf(a.stdout, "  %s\n", s)
					if !s.Alive {
						dead++
						fmt.Fprintf(a.stdout, "%s\n", indent(indent(s.LogTail)))
					}
				}
			}
			if dead > 0 {
				return fmt.Errorf("%d switch process(es) died", dead)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&run, "run", "", "only this run")
	return cmd
}

func (a *app) topoPingAllCommand() *cobra.Command {
	var run string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "pingall",
		Short: "Ping every host from every other host, as Mininet's pingall (root)",
		Long:  `Ping every host from every other host (one ICMP echo each) and print the result as Mininet's pingall does. Exits 1 if a ping went unanswered.`,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := attach("topo pingall", run)
			if err != nil {
				return err
			}
			a.warnDead(r)
			res := r.PingAll(cmd.Context(), timeout)
			res.Write(a.stdout)
			if lost := res.Sent() - res.Received(); lost > 0 {
				return fmt.Errorf("%d of %d pings unanswered", lost, res.Sent())
			}
			return nil
		},
	}
	addRunFlag(cmd, &run)
	cmd.Flags().DurationVar(&timeout, "timeout", time.Second, "wait this long for each reply")
	return cmd
}

func (a *app) topoLinkCommand() *cobra.Command {
	var run string
	cmd := &cobra.Command{
		Use:   "link A B up|down",
		Short: "Bring the links between nodes A and B down or up, both ends (root)",
		Example: "  tracebed topo link leaf1 spine1 down\n" +
			"  tracebed topo link h1 tor up",
		Args: cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			if args[2] != "up" && args[2] != "down" {
				return badInput(fmt.Errorf("link %s %s %s: want up or down", args[0], args[1], args[2]))
			}
			r, err := attach("topo link", run)
			if err != nil {
				return err
			}
			if err := r.Link(args[0], args[1], args[2] == "up"); err != nil {
				return labErr(err)
			}
			fmt.Fprintf(a.stdout, "link %s–%s is %s\n", args[0], args[1], args[2])
			return nil
		},
	}
	addRunFlag(cmd, &run)
	return cmd
}

func (a *app) cleanupCommand() *cobra.Command {
	var run string
	cmd := &cobra.Command{
		Use:   "cleanup",
		Short: "Remove every tracebed namespace, link and switch process (root)",
		Long: `Remove everything tracebed's netns substrate may have left behind, including
the runs of a 'topo up' or 'tracebed mininet' killed with SIGKILL: the
processes that own a run (Mininet's Python process), processes inside
tracebed namespaces (switches, Mininet's node shells), the namespaces
(tb-*), temporary links in the root namespace and the run directories under
/run/tracebed. The logs of switches that had died are kept in
` + lab.KeptLogDir + `.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := requireRoot("cleanup"); err != nil {
				return err
			}
			var ids []string
			var err error
			if run == "" {
				ids, err = lab.Cleanup("")
			} else {
				if err := netns.ValidRunID(run); err != nil {
					return badInput(fmt.Errorf("--run: %w", err))
				}
				all, lerr := lab.Runs()
				if lerr != nil {
					return lerr
				}
				for _, id := range all {
					if id == run {
						ids, err = []string{run}, lab.Remove(run)
					}
				}
			}
			if len(ids) == 0 && err == nil {
				fmt.Fprintln(a.stdout, "nothing to clean up")
			}
			for _, id := range ids {
				fmt.Fprintf(a.stdout, "removed run %s\n", id)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&run, "run", "", "remove only this run")
	return cmd
}

// topoNetnsCommands are the lifecycle subcommands of 'topo'.
func (a *app) topoNetnsCommands() []*cobra.Command {
	return []*cobra.Command{a.topoUpCommand(), a.topoExecCommand(), a.topoCaptureCommand(), a.topoDownCommand(),
		a.topoStatusCommand(), a.topoPingAllCommand(), a.topoLinkCommand(), a.topoCLICommand(), a.topoAllReduceCommand()}
}
