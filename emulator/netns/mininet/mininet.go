//go:build linux && !nonetns

package mininet

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tracebed/tracebed/emulator/netns"
	"github.com/tracebed/tracebed/topologies"
)

// Python finds a Python 3 interpreter that imports mininet: $TRACEBED_PYTHON,
// then python3 on PATH, then /usr/bin/python3 (Debian's mininet package is
// for the system Python; a pyenv or virtualenv python3 first on PATH may not
// have it).
func Python() (string, error) {
	var cands []string
	if p := os.Getenv("TRACEBED_PYTHON"); p != "" {
		cands = append(cands, p)
	}
	if p, err := exec.LookPath("python3"); err == nil {
		cands = append(cands, p)
	}
	cands = append(cands, "/usr/bin/python3")
	for _, p := range cands {
		if err := exec.Command(p, "-c", "import mininet.net").Run(); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("mininet: no Python 3 with Mininet (tried %s): install it with 'apt-get install mininet', or set TRACEBED_PYTHON", strings.Join(cands, ", "))
}

// Available reports whether Mininet can run here: a Python with Mininet
// and its mnexec helper. Its error says what is missing.
func Available() error {
	if _, err := Python(); err != nil {
		return err
	}
	if _, err := exec.LookPath("mnexec"); err != nil {
		return errors.New("mininet: mnexec is not on PATH (apt-get install mininet)")
	}
	return nil
}

// Switch classes of Options.Switch.
const (
	SwitchGo   = "tracebed" // TracebedSwitch: the Go switch
	SwitchBMv2 = "bmv2"     // BMv2Switch: simple_switch_grpc, programmed by the caller
	SwitchNone = "none"     // PortsSwitch: the caller starts the switches
)

// Options configure Start.
type Options struct {
	// RunID names the run; empty picks a random one (netns.NewRunID).
	RunID string
	// Switch is SwitchGo (default), SwitchBMv2 or SwitchNone.
	Switch string
	// Executable is the tracebed binary TracebedSwitch starts (default:
	// this executable); Program and Seed its data plane (default: the
	// helper module's, fwd) and seed.
	Executable string
	Program    string
	Seed       uint64
	// SimpleSwitch is simple_switch_grpc's path for BMv2Switch (default:
	// looked up on PATH).
	SimpleSwitch string
	// MTU of every link (0: netns.DefaultMTU); NoShaping leaves host
	// links unshaped; L2Hosts addresses hosts for L2 switches (always
	// with bmv2).
	MTU       int
	NoShaping bool
	L2Hosts   bool
	// After the network is up and Continue is called, the script runs
	// Test ("pingall"), or the CLI commands of Script, or waits for Stop
	// (Wait), or else hands the user Mininet's CLI on Stdin and Stdout.
	Test   string
	Script string
	Wait   bool
	// Stdin, Stdout and Stderr are the script's (nil: none; output
	// discarded).
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Quiet lowers Mininet's logging to warnings.
	Quiet bool
	// Env is added to the script's environment (and so its switches').
	Env []string
}

// Process is a Mininet script running a topology for tracebed.
type Process struct {
	RunID string
	// Net is the network Mininet built, adopted by tracebed (valid
	// after Start returns).
	Net *netns.Network
	// Nodes are the pids of Mininet's node shells, by node.
	Nodes map[string]int

	cmd      *exec.Cmd
	ctl      *net.UnixConn
	lines    *bufio.Reader
	exited   chan struct{}
	err      error
	stopOnce sync.Once
}

// Start claims the run id, writes the topology's script and Helper into
// the run directory and runs it with Python, then waits until Mininet has
// built and started the network and adopts it. The script then waits for
// Continue. On error, and when ctx ends before Start returns, everything is
// torn down.
func Start(ctx context.Context, top *topologies.Topology, opts Options) (_ *Process, err error) {
	if err := Available(); err != nil {
		return nil, err
	}
	python, _ := Python()
	id := opts.RunID
	if id == "" {
		id = netns.NewRunID()
	}
	if err := netns.Claim(id); err != nil {
		return nil, err
	}
	p := &Process{RunID: id, exited: make(chan struct{})}
	defer func() {
		if err != nil {
			p.Stop()
		}
	}()
	dir := filepath.Join(netns.RunDir, netns.Prefix+id, "mininet")
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("mininet: %w", err)
	}
	script := filepath.Join(dir, scriptName(top))
	if err := os.WriteFile(script, Export(top), 0o600); err != nil {
		return nil, fmt.Errorf("mininet: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, HelperFile), Helper, 0o600); err != nil {
		return nil, fmt.Errorf("mininet: %w", err)
	}
	args, err := scriptArgs(id, opts)
	if err != nil {
		return nil, err
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("mininet: control socket: %w", err)
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "control"), os.NewFile(uintptr(fds[1]), "control")
	c, err := net.FileConn(mine)
	mine.Close()
	if err != nil {
		theirs.Close()
		return nil, fmt.Errorf("mininet: control socket: %w", err)
	}
	p.ctl, p.lines = c.(*net.UnixConn), bufio.NewReader(c)
	p.cmd = exec.Command(python, append([]string{script, "--control-fd", "3"}, args...)...)
	p.cmd.ExtraFiles = []*os.File{theirs}
	p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = opts.Stdin, opts.Stdout, opts.Stderr
	p.cmd.Env = append(os.Environ(), opts.Env...)
	// Mininet dies with this process, tearing its network down (the
	// control socket ends too).
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	err = p.cmd.Start()
	theirs.Close()
	if err != nil {
		return nil, fmt.Errorf("mininet: start %s: %w", python, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	ready, err := p.ready(ctx)
	if err != nil {
		return nil, err
	}
	p.Nodes = ready.Nodes
	p.Net, err = netns.Adopt(id, top, netns.Options{MTU: mtu(opts), L2Hosts: opts.L2Hosts || opts.Switch == SwitchBMv2})
	if err != nil {
		return nil, fmt.Errorf("mininet: %w", err)
	}
	return p, nil
}

func mtu(opts Options) int {
	if opts.MTU == 0 {
		return netns.DefaultMTU
	}
	return opts.MTU
}

// scriptArgs is the script's command line for opts.
func scriptArgs(id string, opts Options) ([]string, error) {
	args := []string{"--run-id", id, "--claimed", "--mtu", strconv.Itoa(mtu(opts))}
	sw := opts.Switch
	if sw == "" {
		sw = SwitchGo
	}
	switch sw {
	case SwitchGo:
		exe := opts.Executable
		if exe == "" {
			var err error
			if exe, err = os.Executable(); err != nil {
				return nil, fmt.Errorf("mininet: the switch executable: %w", err)
			}
		}
		args = append(args, "--tracebed", exe, "--seed", strconv.FormatUint(opts.Seed, 10))
		if opts.Program != "" {
			args = append(args, "--program", opts.Program)
		}
	case SwitchBMv2:
		if opts.SimpleSwitch != "" {
			args = append(args, "--simple-switch-grpc", opts.SimpleSwitch)
		}
	case SwitchNone:
	default:
		return nil, fmt.Errorf("mininet: switch %q: want %s, %s or %s", sw, SwitchGo, SwitchBMv2, SwitchNone)
	}
	args = append(args, "--switch", sw)
	if opts.NoShaping {
		args = append(args, "--no-shaping")
	}
	if opts.L2Hosts {
		args = append(args, "--l2")
	}
	switch {
	case opts.Test != "":
		args = append(args, "--test", opts.Test)
	case opts.Script != "":
		args = append(args, "--script", opts.Script)
	case opts.Wait:
		args = append(args, "--wait")
	}
	if opts.Quiet {
		args = append(args, "--verbosity", "warning")
	}
	return args, nil
}

type readyMsg struct {
	Event string         `json:"event"`
	RunID string         `json:"run_id"`
	Nodes map[string]int `json:"nodes"`
}

// ready waits for the script's ready message.
func (p *Process) ready(ctx context.Context) (*readyMsg, error) {
	type result struct {
		msg *readyMsg
		err error
	}
	got := make(chan result, 1)
	go func() {
		line, err := p.lines.ReadBytes('\n')
		if err != nil {
			got <- result{nil, err}
			return
		}
		var m readyMsg
		if err := json.Unmarshal(line, &m); err != nil || m.Event != "ready" || m.RunID != p.RunID {
			got <- result{nil, fmt.Errorf("unexpected message %q", bytes.TrimSpace(line))}
			return
		}
		got <- result{&m, nil}
	}()
	select {
	case r := <-got:
		if r.err != nil {
			select {
			case <-p.exited:
				return nil, fmt.Errorf("mininet: the script ended before the network was up (%v)", p.err)
			case <-time.After(time.Second):
			}
			return nil, fmt.Errorf("mininet: %w", r.err)
		}
		return r.msg, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(2 * time.Minute):
		return nil, errors.New("mininet: the network was not up within 2 minutes")
	}
}

// Continue lets the script go on to its test, script, CLI or wait.
func (p *Process) Continue() error {
	if _, err := p.ctl.Write([]byte("continue\n")); err != nil {
		return fmt.Errorf("mininet: %w", err)
	}
	return nil
}

// Exited is closed when the script has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Wait waits for the script to exit and returns how it exited, after
// removing anything of the run it left.
func (p *Process) Wait() error {
	<-p.exited
	p.Stop()
	return p.err
}

// Stop tears the network down: it tells the script to stop (Mininet stops
// its switches, links and nodes and the script removes the published
// namespaces and the run directory), gives it 30 s, then ends it, and
// removes whatever of the run is left. It is safe to call more than once.
func (p *Process) Stop() error {
	var err error
	p.stopOnce.Do(func() {
		if p.cmd != nil && p.cmd.Process != nil {
			if p.ctl != nil {
				p.ctl.Write([]byte("stop\n"))
				p.ctl.CloseWrite()
			}
			select {
			case <-p.exited:
			case <-time.After(30 * time.Second):
				p.cmd.Process.Signal(syscall.SIGTERM)
				select {
				case <-p.exited:
				case <-time.After(10 * time.Second):
					p.cmd.Process.Kill()
					<-p.exited
				}
			}
		}
		if p.ctl != nil {
			p.ctl.Close()
		}
		err = netns.Remove(p.RunID)
	})
	return err
}
