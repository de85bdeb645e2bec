package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tracebed/tracebed/emulator/netns"
	"github.com/tracebed/tracebed/emulator/switch/switchcmd"
	"github.com/tracebed/tracebed/topologies"
)

// runState is what 'topo up' records in the run directory for the other
// lifecycle commands.
type runState struct {
	RunID    string                 `json:"run_id"`
	Topology string                 `json:"topology"` // the topology file in the run directory
	Name     string                 `json:"name"`
	Bridge   bool                   `json:"bridge,omitempty"`
	Switches map[string]switchState `json:"switches,omitempty"`
	Started  time.Time              `json:"started"`
	PID      int                    `json:"pid"` // the 'topo up' process
}

type switchState struct {
	PID    int    `json:"pid"`
	Socket string `json:"socket"` // P4Runtime, a Unix socket
	Log    string `json:"log"`
}

func statePath(runID string) string {
	return filepath.Join(netns.RunDir, netns.Prefix+runID, "state.json")
}

// readTopologyArg loads a topology named on the command line: a file, or a
// topology built into the binary (star, leafspine, fattree-k4).
func readTopologyArg(arg string) (*topologies.Topology, []byte, error) {
	data, err := os.ReadFile(arg)
	if err != nil {
		if data, err = topologies.ReadyFile(arg); err != nil {
			return nil, nil, badInput(fmt.Errorf("topology %s: no such file, and not one of the built-in topologies %v", arg, topologies.ReadyFiles()))
		}
	}
	top, err := topologies.Parse(arg, data)
	if err != nil {
		return nil, nil, badInput(err)
	}
	return top, data, nil
}

// findRun returns the state of run id, or of the only run when id is empty.
func findRun(id string) (*runState, *netns.Network, error) {
	if id == "" {
		ids, err := netns.Runs()
		if err != nil {
			return nil, nil, err
		}
		switch len(ids) {
		case 0:
			return nil, nil, errors.New("no topology is up (tracebed topo up TOPOLOGY)")
		case 1:
			id = ids[0]
		default:
			return nil, nil, badInput(fmt.Errorf("several topologies are up (%s): choose one with --run", strings.Join(ids, ", ")))
		}
	}
	data, err := os.ReadFile(statePath(id))
	if err != nil {
		return nil, nil, fmt.Errorf("run %s: %w (a run killed before it finished starting: tracebed cleanup)", id, err)
	}
	var st runState
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, nil, fmt.Errorf("run %s: state: %w", id, err)
	}
	top, err := topologies.Load(st.Topology)
	if err != nil {
		return nil, nil, fmt.Errorf("run %s: %w", id, err)
	}
	n, err := netns.Attach(id, top)
	if err != nil {
		return nil, nil, err
	}
	return &st, n, nil
}

func (a *app) topoUpCommand() *cobra.Command {
	var opts netns.Options
	var program, spin string
	var seed uint64
	var detach bool
	cmd := &cobra.Command{
		Use:   "up TOPOLOGY",
		Short: "Bring a topology up in network namespaces with Go switches (root)",
		Long: `Bring a topology up on the real network stack: a network namespace per host
and switch, veth links, addresses, routes and static neighbour entries, host
links shaped with HTB, and a Go switch ('tracebed switch') in every switch
namespace with a P4Runtime server on a Unix socket. Link delay and loss are
applied by the switches.

It stays in the foreground until Ctrl-C, then tears everything down; with
--detach it returns and leaves the topology up until 'tracebed topo down'.`,
		Example: "  sudo tracebed topo up star\n  sudo tracebed topo up leafspine --detach && sudo tracebed topo exec h1 -- ping -c3 10.0.0.16",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			top, data, err := readTopologyArg(args[0])
			if err != nil {
				return err
			}
			var spinD time.Duration
			if spin != "" {
				if spinD, err = time.ParseDuration(spin); err != nil {
					return badInput(fmt.Errorf("--spin: %w", err))
				}
			}
			reg, err := a.programs()
			if err != nil {
				return err
			}
			if reg.Lookup(program) == nil {
				return badInput(fmt.Errorf("--program %s: the switch runs %v", program, reg.Names()))
			}
			if os.Geteuid() != 0 {
				return errors.New("topo up needs root (network namespaces)")
			}
			ctx := cmd.Context()
			n, err := netns.Up(ctx, top, opts)
			if err != nil {
				return err
			}
			st := &runState{RunID: n.RunID, Name: top.Name, Bridge: opts.Bridge, Switches: map[string]switchState{},
				Started: time.Now(), PID: os.Getpid(), Topology: filepath.Join(n.Dir(), "topology.yaml")}
			procs, err := startSwitches(n, st, data, program, seed, spinD, detach)
			if err != nil {
				n.Down()
				return err
			}
			a.printReach(n, st)
			if detach {
				return nil
			}
			fmt.Fprintln(a.stdout, "\nPress Ctrl-C to tear the topology down.")
			select {
			case <-ctx.Done():
				fmt.Fprintln(a.stdout, "\ntearing down", n.RunID)
			case p := <-procs.Exit:
				fmt.Fprintf(a.stderr, "switch %s exited (log: %s); tearing down\n", p.Name, p.Log)
			}
			procs.Stop()
			a.printCounters(n, st)
			if err := n.Down(); err != nil {
				return err
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.RunID, "run-id", "", "name the run (1–6 lowercase letters or digits; default random)")
	fl.BoolVar(&opts.Bridge, "bridge", false, "forward with Linux bridges instead of Go switches (loop-free topologies only)")
	fl.BoolVar(&opts.NoShaping, "no-shaping", false, "do not shape host links with HTB")
	fl.StringVar(&program, "program", "fwd", "data plane the switches start with")
	fl.Uint64Var(&seed, "seed", 1, "seed of the switches' loss, duplication and reordering")
	fl.StringVar(&spin, "spin", "", "switches busy-poll for timed events this close (e.g. 200us): precise timing, busy cores")
	fl.BoolVar(&detach, "detach", false, "return once the topology is up and leave it running")
	return cmd
}

// startSwitches writes the run's topology file and starts a 'tracebed
// switch' process inside each switch namespace (package switchcmd).
func startSwitches(n *netns.Network, st *runState, topoData []byte, program string, seed uint64, spin time.Duration, detach bool) (*switchcmd.Set, error) {
	if err := os.WriteFile(st.Topology, topoData, 0o600); err != nil {
		return nil, err
	}
	procs := &switchcmd.Set{}
	if !st.Bridge {
		var err error
		procs, err = switchcmd.Start(n, switchcmd.Options{TopologyFile: st.Topology, Program: program, Seed: seed, Spin: spin, Detach: detach})
		if err != nil {
			return nil, err
		}
		for _, p := range procs.Procs {
			st.Switches[p.Name] = switchState{PID: p.Cmd.Process.Pid, Socket: p.Socket, Log: p.Log}
		}
	}
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		procs.Stop()
		return nil, err
	}
	if err := os.WriteFile(statePath(n.RunID), data, 0o600); err != nil {
		procs.Stop()
		return nil, err
	}
	return procs, nil
}

func (a *app) printReach(n *netns.Network, st *runState) {
	w := a.stdout
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
	fmt.Fprintf(w, "  ip netns exec %s ip addr\n", n.Namespace(h1.Name))
	if sw := n.Topology.Switches(); len(sw) > 0 {
		fmt.Fprintf(w, "  tracebed topo capture %s:1 -w %s-1.pcapng   # then: tshark -r %s-1.pcapng\n", sw[0].Name, sw[0].Name, sw[0].Name)
	}
	if len(st.Switches) > 0 {
		fmt.Fprintln(w, "\nP4Runtime (device id 1, gRPC over Unix sockets):")
		for _, sw := range n.Topology.Switches() {
			fmt.Fprintf(w, "  %-10s unix://%s\n", sw.Name, st.Switches[sw.Name].Socket)
		}
	}
	fmt.Fprintf(w, "\nTear down: tracebed topo down --run %s   (or tracebed cleanup)\n", n.RunID)
}

// printCounters prints the port counters the switches logged as they
// stopped (ports that saw traffic only), before the run directory goes.
func (a *app) printCounters(n *netns.Network, st *runState) {
	for _, sw := range n.Topology.Switches() {
		data, err := os.ReadFile(st.Switches[sw.Name].Log)
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
		Example: "  tracebed topo exec h1 -- ping -c3 10.0.0.2\n" +
			"  tracebed topo exec h2 -- iperf3 -s",
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, n, err := findRun(run)
			if err != nil {
				return err
			}
			if n.Topology.Node(args[0]) == nil {
				return badInput(fmt.Errorf("no node %q in run %s", args[0], n.RunID))
			}
			c := exec.Command(args[1], args[2:]...)
			c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
			c.Env = append(os.Environ(), "TRACEBED_RUN="+n.RunID, "TRACEBED_NODE="+args[0])
			if err := n.Start(args[0], c); err != nil {
				return fmt.Errorf("exec on %s: %w", args[0], err)
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
	cmd.Flags().StringVar(&run, "run", "", "run id (default: the only topology up)")
	return cmd
}

// exitCode is an error that sets the process's exit code without a message
// (the exit status of a command run by 'topo exec').
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func (e exitCode) ExitCode() int { return int(e) }

func (a *app) topoCaptureCommand() *cobra.Command {
	var run, out string
	var opts netns.CaptureOptions
	cmd := &cobra.Command{
		Use:   "capture NODE:PORT -w FILE.pcapng",
		Short: "Capture a port's frames, both directions, as pcapng (root)",
		Long: `Capture every frame received and sent on one port as pcapng, readable by
Wireshark and tshark. PORT is a port number (as in 'tracebed topo show') or
an interface name. Stops on Ctrl-C, or after --count frames or --duration.`,
		Example: "  tracebed topo capture tor:1 -w tor-1.pcapng --duration 10s\n  tshark -r tor-1.pcapng",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return badInput(errors.New("-w FILE is required"))
			}
			_, n, err := findRun(run)
			if err != nil {
				return err
			}
			nodeName, port, ok := strings.Cut(args[0], ":")
			node := n.Topology.Node(nodeName)
			if !ok || node == nil {
				return badInput(fmt.Errorf("%s: want NODE:PORT with a node of run %s", args[0], n.RunID))
			}
			iface := port
			if k, err := strconv.Atoi(port); err == nil {
				if k < 1 || k > len(node.Ports) {
					return badInput(fmt.Errorf("%s has ports 1–%d, not %d", nodeName, len(node.Ports), k))
				}
				iface = node.Ports[k-1].Iface
			}
			f, err := os.Create(out)
			if err != nil {
				return err
			}
			defer f.Close()
			fmt.Fprintf(a.stderr, "capturing %s:%s to %s (Ctrl-C to stop)\n", nodeName, iface, out)
			count, err := n.Capture(cmd.Context(), nodeName, iface, f, opts)
			fmt.Fprintf(a.stderr, "%d frames captured\n", count)
			if err != nil {
				return err
			}
			return f.Close()
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&out, "write", "w", "", "pcapng file to write")
	fl.StringVar(&run, "run", "", "run id (default: the only topology up)")
	fl.IntVarP(&opts.Count, "count", "c", 0, "stop after this many frames")
	fl.DurationVar(&opts.Duration, "duration", 0, "stop after this long")
	return cmd
}

func (a *app) topoDownCommand() *cobra.Command {
	var run string
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Tear a topology down: switches, namespaces, links (root)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			st, _, err := findRun(run)
			if err != nil {
				return err
			}
			for _, s := range st.Switches {
				syscall.Kill(s.PID, syscall.SIGTERM)
			}
			if err := netns.Remove(st.RunID); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "run %s (%s) is down\n", st.RunID, st.Name)
			return nil
		},
	}
	cmd.Flags().StringVar(&run, "run", "", "run id (default: the only topology up)")
	return cmd
}

func (a *app) cleanupCommand() *cobra.Command {
	var run string
	cmd := &cobra.Command{
		Use:   "cleanup",
		Short: "Remove every tracebed namespace, link and switch process (root)",
		Long: `Remove everything tracebed's netns substrate may have left behind, including
the runs of a 'topo up' killed with SIGKILL: processes inside tracebed
namespaces (switches, shells), the namespaces (tb-*), temporary links in
the root namespace and the run directories under /run/tracebed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if os.Geteuid() != 0 {
				return errors.New("cleanup needs root")
			}
			var ids []string
			var err error
			if run == "" {
				ids, err = netns.Cleanup("")
			} else {
				all, lerr := netns.Runs()
				if lerr != nil {
					return lerr
				}
				if slices.Contains(all, run) {
					ids, err = []string{run}, netns.Remove(run)
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
	return []*cobra.Command{a.topoUpCommand(), a.topoExecCommand(), a.topoCaptureCommand(), a.topoDownCommand()}
}
