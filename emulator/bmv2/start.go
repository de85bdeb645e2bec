//go:build linux && !nonetns

package bmv2

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/tracebed/tracebed/emulator/netns"
	"github.com/tracebed/tracebed/emulator/switch/switchcmd"
)

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
