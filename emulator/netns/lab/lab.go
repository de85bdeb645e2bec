//go:build linux && !nonetns

package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/tracebed/tracebed/emulator/bmv2"
	"github.com/tracebed/tracebed/emulator/dataplane"
	"github.com/tracebed/tracebed/emulator/netns"
	"github.com/tracebed/tracebed/emulator/p4rt"
	goswitch "github.com/tracebed/tracebed/emulator/switch"
	"github.com/tracebed/tracebed/emulator/switch/switchcmd"
	"github.com/tracebed/tracebed/topologies"
)

// StateFile is the name of a run's state in its directory.
const StateFile = "state.json"

// KeptLogDir is where the log of a switch process that died during a run
// is kept when the run goes down (as tb-RUN-SWITCH.log).
const KeptLogDir = "/var/log/tracebed"

// Networks: who built a run's namespaces.
const (
	NetworkNetns   = "netns"   // tracebed (package netns)
	NetworkMininet = "mininet" // Mininet, with tracebed's helper module
)

// Switch kinds of a run.
const (
	SwitchGo     = "go"
	SwitchBMv2   = "bmv2"
	SwitchBridge = "bridge"
)

// State is what a run records in its directory (StateFile) for the
// commands that attach to it. Mininet runs write the same document from
// Python (emulator/netns/mininet's helper module).
type State struct {
	RunID    string                 `json:"run_id"`
	Topology string                 `json:"topology"` // the topology file, in the run directory
	Name     string                 `json:"name"`     // the topology's name
	Network  string                 `json:"network,omitempty"`
	Switch   string                 `json:"switch,omitempty"` // go, bmv2 or bridge
	Program  string                 `json:"program,omitempty"`
	Bridge   bool                   `json:"bridge,omitempty"`
	Switches map[string]SwitchState `json:"switches,omitempty"`
	Started  time.Time              `json:"started"`
	// PID is the process that owns the run ('topo up' in the
	// foreground, 'tracebed mininet', Mininet's Python): Down asks it
	// to tear down first. PIDStart tells it from a later process of the
	// same pid (see ProcessStart).
	PID      int    `json:"pid"`
	PIDStart uint64 `json:"pid_start,omitempty"`
}

// SwitchState is one switch process of a run.
type SwitchState struct {
	PID      int    `json:"pid"`
	Start    uint64 `json:"start,omitempty"` // ProcessStart of PID
	Socket   string `json:"socket"`          // P4Runtime, a Unix socket
	Log      string `json:"log"`             // its standard output and error
	DeviceID uint64 `json:"device_id,omitempty"`
}

// StatePath returns the path of run id's state.
func StatePath(id string) string {
	return filepath.Join(netns.RunDir, netns.Prefix+id, StateFile)
}

// Write writes the state into the run's directory.
func (st *State) Write() error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp := StatePath(st.RunID) + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	return os.Rename(tmp, StatePath(st.RunID))
}

// ReadState reads run id's state.
func ReadState(id string) (*State, error) {
	data, err := os.ReadFile(StatePath(id))
	if err != nil {
		return nil, err
	}
	var st State
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("run %s: %s: %w", id, StatePath(id), err)
	}
	if st.RunID != id {
		return nil, fmt.Errorf("run %s: %s names run %q", id, StatePath(id), st.RunID)
	}
	if st.Network == "" {
		st.Network = NetworkNetns
	}
	return &st, nil
}

// Options configure Up.
type Options struct {
	// Net configures the namespaces (run id, shaping, MTU, bridges).
	Net netns.Options
	// Switch is SwitchGo (default) or SwitchBMv2; Net.Bridge puts Linux
	// bridges in place of switch processes.
	Switch string
	// Programs are the data planes the switches can run, assembled by
	// the command (the engine knows none); Program names the one they run
	// (default: the registry's default). Bridges need neither.
	Programs *dataplane.Registry
	Program  string
	// Seed seeds the Go switches' injected loss, duplication and
	// reordering; Spin is their busy-poll horizon.
	Seed uint64
	Spin time.Duration
	// SwitchIO selects the Go switches' port sockets (goswitch.IOMode;
	// empty: auto).
	SwitchIO goswitch.IOMode
	// Detach lets the switches outlive this process.
	Detach bool
	// Executable runs the Go switch; empty means this executable.
	Executable string
	// BMv2 configures the bmv2 switches.
	BMv2 bmv2.Options
}

// Run is a topology that is up.
type Run struct {
	State *State
	Net   *netns.Network
	// Procs are the switch processes this process started (Up), nil
	// after Attach.
	Procs *switchcmd.Set

	stopped bool // StopSwitches was called: the switches did not die
}

// InputError marks an error in what the user asked for: an unknown run,
// node or port, an invalid run id (exit code 2 in the command).
type InputError struct{ Err error }

func (e InputError) Error() string { return e.Err.Error() }
func (e InputError) Unwrap() error { return e.Err }

func badInput(format string, args ...any) error { return InputError{fmt.Errorf(format, args...)} }

// Up brings topo up (netns.Up: it claims the run id first and refuses one
// in use), writes topoData (topo's file; nil means topo.YAML()) into the
// run's directory, starts the switches and records the run. On error
// everything it created is removed; a run id in use is left alone.
func Up(ctx context.Context, topo *topologies.Topology, topoData []byte, opts Options) (_ *Run, err error) {
	if opts.Switch == "" {
		opts.Switch = SwitchGo
	}
	if opts.Net.Bridge {
		opts.Switch = SwitchBridge
	}
	var prog *dataplane.Program
	if opts.Switch != SwitchBridge {
		if prog, err = Lookup(opts.Programs, opts.Program); err != nil {
			return nil, err
		}
		opts.Program = prog.Name
	}
	switch opts.Switch {
	case SwitchGo, SwitchBridge:
	case SwitchBMv2:
		if _, err := bmv2.FindTools(opts.BMv2); err != nil {
			return nil, InputError{err}
		}
		opts.Net.L2Hosts = true // bmv2 routes without rewriting MACs
		// bmv2 on the links themselves: a lab's run may outlive this
		// process (--detach), and the link stages run in the process
		// that starts them (docs/bmv2.md).
		opts.BMv2.DirectLinks = true
	default:
		return nil, badInput("switch %q: want %s, %s or %s", opts.Switch, SwitchGo, SwitchBMv2, SwitchBridge)
	}
	if opts.Net.RunID != "" {
		if err := netns.ValidRunID(opts.Net.RunID); err != nil {
			return nil, InputError{err}
		}
	}
	started := time.Now()
	n, err := netns.Up(ctx, topo, opts.Net)
	if err != nil {
		return nil, err
	}
	r := &Run{Net: n, State: &State{RunID: n.RunID, Name: topo.Name, Network: NetworkNetns, Switch: opts.Switch,
		Program: opts.Program, Bridge: opts.Net.Bridge, Switches: map[string]SwitchState{}, Started: started,
		PID: os.Getpid(), Topology: filepath.Join(n.Dir(), "topology.yaml")}}
	r.State.PIDStart, _ = ProcessStart(r.State.PID)
	defer func() {
		if err != nil {
			if r.Procs != nil {
				r.Procs.Stop()
			}
			n.Down()
		}
	}()
	if topoData == nil {
		topoData = topo.YAML()
	}
	if err := os.WriteFile(r.State.Topology, topoData, 0o600); err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	switch opts.Switch {
	case SwitchGo:
		r.Procs, err = switchcmd.Start(n, switchcmd.Options{Executable: opts.Executable, TopologyFile: r.State.Topology,
			Program: opts.Program, Seed: opts.Seed, Spin: opts.Spin, IO: opts.SwitchIO, Detach: opts.Detach})
		if err != nil {
			return nil, err
		}
	case SwitchBMv2:
		if r.Procs, err = bmv2.Start(ctx, n, opts.BMv2); err != nil {
			return nil, err
		}
		sockets := map[string]string{}
		for _, p := range r.Procs.Procs {
			sockets[p.Name] = p.Socket
		}
		if err := LoadBMv2(ctx, topo, sockets, prog, opts.BMv2); err != nil {
			return nil, err
		}
	}
	if r.Procs != nil {
		for _, p := range r.Procs.Procs {
			start, _ := ProcessStart(p.Cmd.Process.Pid)
			r.State.Switches[p.Name] = SwitchState{PID: p.Cmd.Process.Pid, Start: start, Socket: p.Socket, Log: p.Log, DeviceID: 1}
		}
	}
	if err := r.State.Write(); err != nil {
		return nil, err
	}
	return r, nil
}

// Lookup returns the program of reg called name, or reg's default when
// name is empty. An unknown name is an InputError.
func Lookup(reg *dataplane.Registry, name string) (*dataplane.Program, error) {
	if reg == nil {
		return nil, errors.New("lab: no data planes were handed in (Options.Programs)")
	}
	if name == "" {
		return reg.Default(), nil
	}
	prog := reg.Lookup(name)
	if prog == nil {
		return nil, badInput("program %q: the switches run %v", name, reg.Names())
	}
	return prog, nil
}

// LoadBMv2 compiles prog for bmv2 and loads it on every switch of topo,
// whose P4Runtime servers listen on sockets (by switch name): pipeline
// (SetForwardingPipelineConfig) and the entries its Go twin starts with
// (bmv2.Configure), as the netns testbed does.
func LoadBMv2(ctx context.Context, topo *topologies.Topology, sockets map[string]string, prog *dataplane.Program, opts bmv2.Options) error {
	compiled, err := bmv2.Compile(ctx, prog, opts)
	if err != nil {
		return err
	}
	for _, sw := range topo.Switches() {
		c, err := p4rt.Dial(ctx, sockets[sw.Name], p4rt.DialOptions{DeviceID: bmv2.DeviceID})
		if err != nil {
			return fmt.Errorf("lab: switch %s: %w", sw.Name, err)
		}
		err = c.SetPipeline(ctx, compiled.P4Info, compiled.JSON, 1)
		if err == nil {
			err = bmv2.Configure(ctx, c, topo, sw, prog)
		}
		c.Close()
		if err != nil {
			return fmt.Errorf("lab: switch %s: %w", sw.Name, err)
		}
	}
	return nil
}

// Runs lists the ids of the runs that are up (or left behind), sorted.
func Runs() ([]string, error) { return netns.Runs() }

// Attach returns run id, or the only run when id is empty. An unknown or
// invalid id, or an empty one with several runs up, is an InputError.
func Attach(id string) (*Run, error) {
	ids, err := netns.Runs()
	if err != nil {
		return nil, err
	}
	if id == "" {
		switch len(ids) {
		case 0:
			return nil, badInput("no topology is up (tracebed topo up TOPOLOGY)")
		case 1:
			id = ids[0]
		default:
			return nil, badInput("several topologies are up (%s): choose one with --run", strings.Join(ids, ", "))
		}
	}
	if err := netns.ValidRunID(id); err != nil {
		return nil, InputError{err}
	}
	if !slices.Contains(ids, id) {
		if len(ids) == 0 {
			return nil, badInput("there is no run %s: no topology is up", id)
		}
		return nil, badInput("there is no run %s (runs up: %s)", id, strings.Join(ids, ", "))
	}
	st, err := ReadState(id)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("run %s has no state: it is an experiment's network ('tracebed run --substrate netns'), or still starting, or was killed before it finished (then 'tracebed cleanup --run %s' removes it)", id, id)
	}
	if err != nil {
		return nil, err
	}
	top, err := topologies.Load(st.Topology)
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", id, err)
	}
	n, err := netns.Attach(id, top)
	if err != nil {
		return nil, err
	}
	n.SetL2Hosts(st.Bridge || st.Switch == SwitchBMv2)
	return &Run{State: st, Net: n}, nil
}

// Topology returns the run's topology.
func (r *Run) Topology() *topologies.Topology { return r.Net.Topology }

// Exec starts cmd inside node's namespace, with TRACEBED_RUN and
// TRACEBED_NODE in its environment (added to cmd.Env, or to this process's
// environment when cmd.Env is nil). The caller waits for it.
func (r *Run) Exec(node string, cmd *exec.Cmd) error {
	if r.Net.Topology.Node(node) == nil {
		return badInput("no node %q in run %s", node, r.State.RunID)
	}
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, "TRACEBED_RUN="+r.State.RunID, "TRACEBED_NODE="+node)
	if err := r.Net.Start(node, cmd); err != nil {
		return fmt.Errorf("exec on %s: %w", node, err)
	}
	return nil
}

// Link brings the links between nodes a and b up or down (both ends).
func (r *Run) Link(a, b string, up bool) error {
	for _, x := range []string{a, b} {
		if r.Net.Topology.Node(x) == nil {
			return badInput("no node %q in run %s", x, r.State.RunID)
		}
	}
	if err := r.Net.SetLink(a, b, up); err != nil {
		return InputError{err}
	}
	return nil
}

// Port resolves NODE:PORT, PORT a port number (as in 'tracebed topo show')
// or an interface name, to the node and interface.
func (r *Run) Port(spec string) (node, iface string, err error) {
	nodeName, port, ok := strings.Cut(spec, ":")
	n := r.Net.Topology.Node(nodeName)
	if !ok || n == nil {
		return "", "", badInput("%s: want NODE:PORT with a node of run %s", spec, r.State.RunID)
	}
	for _, p := range n.Ports {
		if p.Iface == port || fmt.Sprint(p.Num) == port {
			return nodeName, p.Iface, nil
		}
	}
	return "", "", badInput("%s has ports 1–%d (%s), not %q", nodeName, len(n.Ports), n.Ports[0].Iface+"…", port)
}

// Capture records the frames of a port (NODE:PORT, see Port), both
// directions, as pcapng into w until ctx ends or a limit of opts is
// reached. It returns the number of frames written.
func (r *Run) Capture(ctx context.Context, port string, w io.Writer, opts netns.CaptureOptions) (int, error) {
	node, iface, err := r.Port(port)
	if err != nil {
		return 0, err
	}
	return r.Net.Capture(ctx, node, iface, w, opts)
}

// Down tears the run down: it keeps the log of every switch that had died
// (KeptLogDir; returned as kept), asks the process that owns the run to
// tear down (SIGTERM) and gives it up to ownerGrace, stops the switch
// processes (StopSwitches) and removes the namespaces, links and run
// directory.
func (r *Run) Down() (kept []string, err error) {
	if !r.stopped {
		for _, s := range r.Status() {
			if !s.Alive {
				if p, err := r.KeepLog(s.Name); err == nil {
					kept = append(kept, p)
				}
			}
		}
	}
	if owner := r.State.PID; owner != os.Getpid() && Alive(owner, r.State.PIDStart) {
		syscall.Kill(owner, syscall.SIGTERM)
		waitGone(ownerGrace, func() bool { return !Alive(owner, r.State.PIDStart) })
	}
	r.StopSwitches()
	return kept, netns.Remove(r.State.RunID)
}

// StopSwitches stops the run's switch processes (SIGTERM, so that they log
// their counters; SIGKILL after 3 s) and waits for them: a switch stopped
// this way did not die.
func (r *Run) StopSwitches() {
	r.stopped = true
	if r.Procs != nil {
		r.Procs.Stop()
		return
	}
	var pids []int
	for _, s := range r.State.Switches {
		if Alive(s.PID, s.Start) {
			syscall.Kill(s.PID, syscall.SIGTERM)
			pids = append(pids, s.PID)
		}
	}
	if !waitGone(3*time.Second, func() bool { return !anyAlive(pids) }) {
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func anyAlive(pids []int) bool {
	for _, pid := range pids {
		if Alive(pid, 0) {
			return true
		}
	}
	return false
}

// ownerGrace is how long the owner of a run gets to tear it down after
// SIGTERM: Mininet stops a leaf-spine's links, switches and hosts in a few
// seconds, more on a busy machine.
const ownerGrace = 30 * time.Second

// waitGone polls gone until it reports true or timeout passes.
func waitGone(timeout time.Duration, gone func() bool) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if gone() {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return gone()
}

// KeepLog copies the log of switch name to KeptLogDir and returns its path.
func (r *Run) KeepLog(name string) (string, error) {
	s, ok := r.State.Switches[name]
	if !ok {
		return "", badInput("no switch process %q in run %s", name, r.State.RunID)
	}
	data, err := os.ReadFile(s.Log)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(KeptLogDir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(KeptLogDir, fmt.Sprintf("%s%s-%s.log", netns.Prefix, r.State.RunID, name))
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return "", err
	}
	return path, nil
}

// Cleanup removes every run whose id starts with prefix (every run for an
// empty prefix), as netns.Cleanup does, after ending the processes that
// own them outside their namespaces — a Mininet run's Python process and
// 'tracebed mininet' — and keeping the logs of switches that had died. It
// returns the ids it removed.
func Cleanup(prefix string) ([]string, error) {
	ids, err := netns.Runs()
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		if strings.HasPrefix(id, prefix) {
			stopOwners(id)
		}
	}
	return netns.Cleanup(prefix)
}

// Remove removes run id as Cleanup does.
func Remove(id string) error {
	if err := netns.ValidRunID(id); err != nil {
		return InputError{err}
	}
	stopOwners(id)
	return netns.Remove(id)
}

// OwnerFile, in a run's directory, holds the pid of a process outside the
// run's namespaces that must end with it (Mininet's Python process writes
// its own as soon as it claims the run), with its ProcessStart.
const OwnerFile = "owner.pid"

// stopOwners keeps the logs of dead switches of run id and ends the
// processes that own it (State.PID, OwnerFile) other than this one.
func stopOwners(id string) {
	type proc struct {
		pid   int
		start uint64
	}
	var owners []proc
	if st, err := ReadState(id); err == nil {
		r := &Run{State: st}
		for _, s := range r.Status() {
			if !s.Alive {
				r.KeepLog(s.Name)
			}
		}
		owners = append(owners, proc{st.PID, st.PIDStart})
	}
	if data, err := os.ReadFile(filepath.Join(netns.RunDir, netns.Prefix+id, OwnerFile)); err == nil {
		var p proc
		if _, err := fmt.Sscan(string(data), &p.pid, &p.start); err == nil {
			owners = append(owners, p)
		}
	}
	for _, p := range owners {
		if p.pid > 0 && p.pid != os.Getpid() && p.start != 0 && Alive(p.pid, p.start) {
			syscall.Kill(p.pid, syscall.SIGTERM)
			if !waitGone(ownerGrace, func() bool { return !Alive(p.pid, p.start) }) {
				syscall.Kill(p.pid, syscall.SIGKILL)
			}
		}
	}
}
