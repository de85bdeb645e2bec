package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/spf13/cobra"

	goswitch "github.com/tracebed/tracebed/emulator/switch"
	"github.com/tracebed/tracebed/p4/programs"
)

func (a *app) switchCommand() *cobra.Command {
	var cfg goswitch.Config
	var topoArg, listen, spin string
	cmd := &cobra.Command{
		Use:   "switch --topology FILE --name SWITCH --grpc ADDRESS",
		Short: "Run the Go switch on this network namespace's interfaces (root)",
		Long: `Run the Go switch for one switch of a topology: its ports are the interfaces
of the current network namespace named as in the topology, the data plane is
one of the registered programs, and a P4Runtime server listens on a Unix
socket or a loopback address (never on an address other hosts reach).
'tracebed topo up' starts one inside each switch namespace; by hand:

  ip netns exec tb-RUN-tor tracebed switch --topology star.yaml --name tor --grpc /tmp/tor.sock

It stops on SIGINT or SIGTERM and prints its counters.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if topoArg == "" || cfg.Name == "" || listen == "" {
				return badInput(errors.New("--topology, --name and --grpc are required"))
			}
			top, _, err := readTopologyArg(topoArg)
			if err != nil {
				return err
			}
			if spin != "" {
				if cfg.Spin, err = time.ParseDuration(spin); err != nil {
					return badInput(fmt.Errorf("--spin: %w", err))
				}
			}
			network, address, err := validLoopback(listen)
			if err != nil {
				return badInput(err)
			}
			if cfg.Programs, err = programs.Registry(); err != nil {
				return err
			}
			cfg.Topology = top
			cfg.Log = slog.New(slog.NewTextHandler(a.stderr, nil))
			sw, err := goswitch.New(cfg)
			if err != nil {
				return err
			}
			if network == "unix" {
				os.Remove(address)
			}
			lis, err := net.Listen(network, address)
			if err != nil {
				return err
			}
			g := goswitch.NewGRPCServer()
			goswitch.NewServer(sw).Register(g)
			go g.Serve(lis)
			ctx := cmd.Context() // ends on SIGINT or SIGTERM
			runCtx, stopRun := context.WithCancel(context.Background())
			defer stopRun()
			runErr := make(chan error, 1)
			go func() { runErr <- sw.Run(runCtx) }()
			cfg.Log.Info("switch running", "switch", cfg.Name, "ports", len(sw.Node().Ports), "program", cfg.Program, "p4runtime", listen)
			var st goswitch.Stats
			var serr error
			select {
			case <-ctx.Done():
				// Take the counters, then stop the data plane.
				sctx, cancel := context.WithTimeout(context.Background(), time.Second)
				st, serr = sw.Stats(sctx)
				cancel()
				g.Stop()
				stopRun()
				err = <-runErr
			case err = <-runErr:
				g.Stop()
				serr = errors.New("stopped")
			}
			if network == "unix" {
				os.Remove(address)
			}
			if serr == nil {
				for i, p := range st.Ports[1:] {
					fmt.Fprintf(a.stderr, "port %d: rx %d frames, tx %d, queue drops %d, lost %d, errors %d, max queue %d B\n",
						i+1, p.RxPackets, p.TxPackets, p.QueueDrops, p.Lost, p.RxOversize+p.RxErrors+p.TxErrors+p.RxKernelDrops, p.MaxQueueBytes)
				}
			}
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&topoArg, "topology", "", "topology file (or built-in name)")
	fl.StringVar(&cfg.Name, "name", "", "which switch of the topology this is")
	fl.StringVar(&listen, "grpc", "", "P4Runtime address: a Unix socket path, or 127.0.0.1:PORT")
	fl.StringVar(&cfg.Program, "program", "fwd", "data plane to start with")
	fl.Uint64Var(&cfg.Seed, "seed", 1, "seed of injected loss, duplication and reordering")
	fl.Uint64Var(&cfg.DeviceID, "device-id", 1, "P4Runtime device id")
	fl.StringVar(&spin, "spin", "", "busy-poll for timed events this close (e.g. 200us)")
	return cmd
}
