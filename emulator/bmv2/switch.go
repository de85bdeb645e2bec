package bmv2

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/tracebed/tracebed/emulator/netns"
	"github.com/tracebed/tracebed/topologies"
)

// Process is one running simple_switch_grpc.
type Process struct {
	Name   string // the switch
	Target string // its P4Runtime server: a Unix socket in the run directory
	Log    string // its log and output
	Cmd    *exec.Cmd
	exited chan struct{}
	err    error
}

// Err returns how the process exited; valid once it has.
func (p *Process) Err() error { return p.err }

// Set is the bmv2 switches of a network.
type Set struct {
	Procs []*Process
	// Exit receives each process as it exits.
	Exit chan *Process
}

// SwitchArgs is simple_switch_grpc's command line for switch sw: device
// id, one -i PORT@IFACE per port with the topology's port numbers, its log
// on the console (Start sends it to a file), no program until a controller pushes one (--no-p4), then, after
// "--", the target options: the P4Runtime server on a Unix socket (the
// controller runs in another namespace, where the switch's loopback is out
// of reach), the CPU port and the priority queues if asked for.
func SwitchArgs(sw *topologies.Node, socket string, opts Options) []string {
	args := []string{"--device-id", strconv.Itoa(DeviceID)}
	for _, p := range sw.Ports {
		args = append(args, "-i", fmt.Sprintf("%d@%s", p.Num, p.Iface))
	}
	level := opts.LogLevel
	if level == "" {
		level = "warn"
	}
	args = append(args, "--log-console", "--log-level", level, "--no-p4",
		"--", "--grpc-server-addr", "unix:"+socket)
	if opts.CPUPort > 0 {
		args = append(args, "--cpu-port", strconv.Itoa(opts.CPUPort))
	}
	if opts.PriorityQueues && sw.Queues > 1 {
		args = append(args, "--priority-queues", strconv.Itoa(sw.Queues))
	}
	return args
}

// Start starts simple_switch_grpc in every switch namespace of n and
// waits until each serves P4Runtime. The switches die with this process
// (parent-death signal). On error it stops those it started.
func Start(ctx context.Context, n *netns.Network, opts Options) (*Set, error) {
	tools, err := FindTools(opts)
	if err != nil {
		return nil, err
	}
	set := &Set{Exit: make(chan *Process, len(n.Topology.Switches()))}
	for _, sw := range n.Topology.Switches() {
		p := &Process{Name: sw.Name, Target: filepath.Join(n.Dir(), sw.Name+".bmv2.sock"),
			Log: filepath.Join(n.Dir(), sw.Name+".bmv2.log"), exited: make(chan struct{})}
		out, err := os.Create(p.Log)
		if err != nil {
			set.Stop()
			return nil, fmt.Errorf("bmv2: %w", err)
		}
		c := exec.Command(tools.Switch, SwitchArgs(sw, p.Target, opts)...)
		c.Stdout, c.Stderr = out, out
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
		err = n.Start(sw.Name, c)
		out.Close()
		if err != nil {
			set.Stop()
			return nil, fmt.Errorf("bmv2: start %s on %s: %w", SwitchTool, sw.Name, err)
		}
		p.Cmd = c
		set.Procs = append(set.Procs, p)
		go func() {
			p.err = c.Wait()
			close(p.exited)
			set.Exit <- p
		}()
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, p := range set.Procs {
		if err := p.wait(ctx, deadline); err != nil {
			set.Stop()
			out, _ := os.ReadFile(p.Log)
			return nil, fmt.Errorf("bmv2: switch %s: %w\n%s", p.Name, err, out)
		}
	}
	return set, nil
}

func (p *Process) wait(ctx context.Context, deadline time.Time) error {
	for {
		if c, err := net.Dial("unix", p.Target); err == nil {
			c.Close()
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("%s exited during start-up (%v)", SwitchTool, p.err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s serves no P4Runtime on %s after 20s", SwitchTool, p.Target)
		}
	}
}

// Stop ends every switch (SIGTERM, then SIGKILL after 3 s) and waits for
// them. It is safe to call more than once.
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
