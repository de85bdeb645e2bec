//go:build linux && !nonetns

package goswitch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc"

	"github.com/tracebed/tracebed/emulator/dataplane"
	"github.com/tracebed/tracebed/emulator/netns"
)

// SocketPath is where the P4Runtime server of switch name in run n listens:
// a Unix socket in the run's directory (only root can reach it; nothing on
// any network can).
func SocketPath(n *netns.Network, name string) string {
	return filepath.Join(n.Dir(), name+".sock")
}

// FabricOptions configure StartFabric.
type FabricOptions struct {
	Program string // initial program of every switch (empty: the registry's default)
	Seed    uint64
	Spin    time.Duration
	// BusyPoll is the switches' busy-poll time (see Config.BusyPoll).
	BusyPoll time.Duration
	IO       IOMode // the ports' sockets (see Config.IO)
	Log      *slog.Logger
}

// Fabric is a Go switch for every switch of a network, run in this process:
// each opens its ports inside its switch's namespace and serves P4Runtime on
// SocketPath. It is what tests and experiments use when they need no
// separate switch processes ('tracebed topo up' runs 'tracebed switch'
// processes instead; both serve the same sockets).
type Fabric struct {
	Switches map[string]*Switch
	cancel   context.CancelFunc
	done     []chan error
	servers  []*grpc.Server
}

// StartFabric starts the switches of n. On error it stops those it started.
func StartFabric(n *netns.Network, programs *dataplane.Registry, opts FabricOptions) (*Fabric, error) {
	ctx, cancel := context.WithCancel(context.Background())
	f := &Fabric{Switches: map[string]*Switch{}, cancel: cancel}
	for _, node := range n.Topology.Switches() {
		var sw *Switch
		var lis net.Listener
		err := n.Do(node.Name, func() error {
			var err error
			sw, err = New(Config{Topology: n.Topology, Name: node.Name, Programs: programs, Program: opts.Program, DeviceID: DefaultDeviceID,
				Seed: opts.Seed, Spin: opts.Spin, BusyPoll: opts.BusyPoll, IO: opts.IO, Log: opts.Log})
			return err
		})
		if err == nil {
			path := SocketPath(n, node.Name)
			os.Remove(path)
			lis, err = net.Listen("unix", path)
			if err != nil {
				sw.release()
			}
		}
		if err != nil {
			f.Stop()
			return nil, fmt.Errorf("switch %s: %w", node.Name, err)
		}
		g := NewGRPCServer()
		NewServer(sw).Register(g)
		go g.Serve(lis)
		done := make(chan error, 1)
		go func() { done <- sw.Run(ctx) }()
		f.Switches[node.Name] = sw
		f.done = append(f.done, done)
		f.servers = append(f.servers, g)
	}
	return f, nil
}

// Stop stops every switch and server and waits for them.
func (f *Fabric) Stop() error {
	for _, g := range f.servers {
		g.Stop()
	}
	f.cancel()
	var errs []error
	for _, d := range f.done {
		errs = append(errs, <-d)
	}
	f.servers, f.done = nil, nil
	return errors.Join(errs...)
}
