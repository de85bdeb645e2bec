//go:build linux && !nonetns

package switchcmd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/tracebed/tracebed/emulator/netns"
	goswitch "github.com/tracebed/tracebed/emulator/switch"
)

// Options configure Start.
type Options struct {
	// Executable runs the switch command ('EXE switch --topology …');
	// empty means the running executable (os.Executable).
	Executable string
	// TopologyFile is the topology the switches read; empty means
	// topology.yaml in the run's directory, written by Start from
	// n.Topology.
	TopologyFile string
	// Program is the data plane every switch starts with; empty means
	// the default of the switch command's registry.
	Program string
	// Seed seeds the switches' link impairments.
	Seed uint64
	// Spin is the switches' busy-poll horizon (see goswitch.Config.Spin).
	Spin time.Duration
	// IO selects the switches' port sockets (goswitch.Config.IO; empty:
	// auto), BusyPoll their busy polling (goswitch.Config.BusyPoll).
	IO       goswitch.IOMode
	BusyPoll time.Duration
	// Detach lets the switches outlive the process that started them.
	// Otherwise each gets SIGTERM when its starter dies, even by SIGKILL
	// (parent-death signal).
	Detach bool
	// StartTimeout bounds the wait for every P4Runtime socket (default
	// 10 s).
	StartTimeout time.Duration
}

// Process is one running switch process.
type Process struct {
	Name   string // the switch
	Socket string // its P4Runtime server, a Unix socket
	Log    string // its standard output and error
	Cmd    *exec.Cmd
	exited chan struct{} // closed when the process has been waited for
	err    error         // its exit status, once exited is closed
}

// Exited is closed once the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Err returns how the process exited; valid once Exited is closed.
func (p *Process) Err() error { return p.err }

// Set is the switch processes of a network.
type Set struct {
	Procs []*Process // in the topology's switch order
	// Exit receives each process as it exits (buffered for all of them).
	Exit chan *Process
}

// Switch returns the process of the named switch, or nil.
func (s *Set) Switch(name string) *Process {
	for _, p := range s.Procs {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// Start starts a switch process in each switch namespace of n, each
// serving P4Runtime on goswitch.SocketPath and logging to SWITCH.log in the
// run's directory, and waits until every one serves. On error it stops
// those it started; the error includes the failed switch's log.
func Start(n *netns.Network, opts Options) (*Set, error) {
	if os.Getenv(ChildEnv) != "" {
		// A test binary started as a switch that runs its tests instead:
		// its TestMain lacks switchcmd.Main. Starting switches from it
		// would recurse.
		return nil, errors.New("switchcmd: this process was started as a switch process but did not run the switch command (a test binary whose TestMain does not call switchcmd.Main first)")
	}
	exe := opts.Executable
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("switchcmd: the switch executable: %w", err)
		}
	}
	topo := opts.TopologyFile
	if topo == "" {
		topo = filepath.Join(n.Dir(), "topology.yaml")
		if err := os.WriteFile(topo, n.Topology.YAML(), 0o600); err != nil {
			return nil, fmt.Errorf("switchcmd: %w", err)
		}
	}
	var procs []*Process
	for _, sw := range n.Topology.Switches() {
		p := &Process{Name: sw.Name, Socket: goswitch.SocketPath(n, sw.Name), Log: filepath.Join(n.Dir(), sw.Name+".log")}
		args := []string{"switch", "--topology", topo, "--name", sw.Name, "--grpc", p.Socket,
			"--seed", strconv.FormatUint(opts.Seed, 10)}
		if opts.Program != "" {
			args = append(args, "--program", opts.Program)
		}
		if opts.Spin > 0 {
			args = append(args, "--spin", opts.Spin.String())
		}
		if opts.IO != "" {
			args = append(args, "--io", string(opts.IO))
		}
		if opts.BusyPoll > 0 {
			args = append(args, "--busy-poll", opts.BusyPoll.String())
		}
		p.Cmd = exec.Command(exe, args...)
		p.Cmd.Env = append(os.Environ(), ChildEnv+"=1")
		procs = append(procs, p)
	}
	set, err := Launch(n, procs, opts.Detach)
	if err != nil {
		return nil, err
	}
	timeout := opts.StartTimeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	if err := set.Wait(context.Background(), timeout); err != nil {
		return nil, err
	}
	return set, nil
}

// Launch starts the processes of procs, each in the namespace of the switch
// it names, with its output in its Log, in its own process group (Ctrl-C
// reaches only the starter, which stops the switches in order) and, unless
// detach, dying with the starter (parent-death signal). Each Process needs
// Name, Socket, Log and an unstarted Cmd. On error it stops those it
// started. bmv2's simple_switch_grpc goes through it as the Go switch does.
func Launch(n *netns.Network, procs []*Process, detach bool) (*Set, error) {
	set := &Set{Exit: make(chan *Process, len(procs))}
	for _, p := range procs {
		p.exited = make(chan struct{})
		logf, err := os.Create(p.Log)
		if err != nil {
			set.Stop()
			return nil, fmt.Errorf("switchcmd: %w", err)
		}
		c := p.Cmd
		c.Stdout, c.Stderr = logf, logf
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if !detach {
			c.SysProcAttr.Pdeathsig = syscall.SIGTERM
		}
		err = n.Start(p.Name, c)
		logf.Close()
		if err != nil {
			set.Stop()
			return nil, fmt.Errorf("start %s on switch %s: %w", filepath.Base(c.Path), p.Name, err)
		}
		set.Procs = append(set.Procs, p)
		go func() {
			p.err = c.Wait()
			close(p.exited)
			set.Exit <- p
		}()
	}
	return set, nil
}

// Wait waits until every process serves its P4Runtime socket. When one
// exits, the context ends or timeout passes first, it stops them all and
// returns an error with that switch's log.
func (s *Set) Wait(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for _, p := range s.Procs {
		if err := p.waitSocket(ctx, deadline); err != nil {
			s.Stop()
			log, _ := os.ReadFile(p.Log)
			return fmt.Errorf("switch %s: %w\n%s", p.Name, err, log)
		}
	}
	return nil
}

// waitSocket waits until p serves its socket, exits, ctx ends or deadline
// passes.
func (p *Process) waitSocket(ctx context.Context, deadline time.Time) error {
	for {
		if c, err := net.Dial("unix", p.Socket); err == nil {
			c.Close()
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("%s exited during start-up (%v)", filepath.Base(p.Cmd.Path), p.err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no P4Runtime socket %s before the start-up deadline", p.Socket)
		}
	}
}

// Stop asks every switch to stop (SIGTERM: it prints its counters) and
// waits for them, killing those still running after 3 s. It is safe to
// call more than once.
func (s *Set) Stop() {
	for _, p := range s.Procs {
		select {
		case <-p.exited:
		default:
			p.Cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	deadline := time.Now().Add(3 * time.Second)
	for _, p := range s.Procs {
		select {
		case <-p.exited:
		case <-time.After(time.Until(deadline)):
			p.Cmd.Process.Kill()
			<-p.exited
		}
	}
}
