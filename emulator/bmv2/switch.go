package bmv2

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/tracebed/tracebed/emulator/netns"
	"github.com/tracebed/tracebed/emulator/switch/switchcmd"
	"github.com/tracebed/tracebed/topologies"
)

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

// Start starts simple_switch_grpc in every switch namespace of n (through
// switchcmd.Launch, as the Go switches start) and waits until each serves
// P4Runtime on BMV2SOCKET in the run directory. The switches die with this
// process (parent-death signal). On error it stops those it started.
func Start(ctx context.Context, n *netns.Network, opts Options) (*switchcmd.Set, error) {
	tools, err := FindTools(opts)
	if err != nil {
		return nil, err
	}
	var procs []*switchcmd.Process
	for _, sw := range n.Topology.Switches() {
		p := &switchcmd.Process{Name: sw.Name, Socket: filepath.Join(n.Dir(), sw.Name+".bmv2.sock"),
			Log: filepath.Join(n.Dir(), sw.Name+".bmv2.log")}
		p.Cmd = exec.Command(tools.Switch, SwitchArgs(sw, p.Socket, opts)...)
		procs = append(procs, p)
	}
	set, err := switchcmd.Launch(n, procs, false)
	if err != nil {
		return nil, fmt.Errorf("bmv2: %w", err)
	}
	if err := set.Wait(ctx, 20*time.Second); err != nil {
		return nil, fmt.Errorf("bmv2: %w", err)
	}
	return set, nil
}
