//go:build linux && !nonetns

package switchcmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	goswitch "github.com/tracebed/tracebed/emulator/switch"
	"github.com/tracebed/tracebed/topologies"
)

// InputError marks an error in the command line (exit code 2).
type InputError struct{ Err error }

func (e InputError) Error() string { return e.Err.Error() }
func (e InputError) Unwrap() error { return e.Err }

// IsInputError reports whether err is a command-line error of the switch
// command.
func IsInputError(err error) bool {
	var ie InputError
	return errors.As(err, &ie)
}

func badInput(err error) error { return InputError{err} }

// Command returns the 'switch' command, whose switch runs the programs of
// programs; stderr receives its log and the counters it prints when it
// stops.
func Command(stderr io.Writer, programs Registry) *cobra.Command {
	var cfg goswitch.Config
	var topoArg, listen, spin, ioMode, busyPoll string
	cmd := &cobra.Command{
		Use:   "switch --topology FILE --name SWITCH --grpc ADDRESS",
		Short: "Run the Go switch on this network namespace's interfaces (root)",
		Long: `Run the Go switch for one switch of a topology: its ports are the interfaces
of the current network namespace named as in the topology, the data plane is
one of the registered programs, and a P4Runtime server listens on a Unix
socket or a loopback address (never on an address other hosts reach).
'tracebed topo up' and 'tracebed run --substrate netns' start one inside each
switch namespace; by hand:

  ip netns exec tb-RUN-tor tracebed switch --topology star.yaml --name tor --grpc /tmp/tor.sock

Frames up to the interfaces' MTU are accepted (jumbo frames included). Ports
are AF_XDP sockets fed by an XDP program on each interface where the kernel
allows (--io auto), else AF_PACKET sockets; with AF_XDP, a capture on the
switch's own interface sees no frame (capture on the other end of the link,
or run with --io afpacket). It stops on SIGINT or SIGTERM and prints its
counters.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if topoArg == "" || cfg.Name == "" || listen == "" {
				return badInput(errors.New("--topology, --name and --grpc are required"))
			}
			top, err := topologies.Open(topoArg)
			if err != nil {
				return badInput(err)
			}
			if spin != "" {
				if cfg.Spin, err = time.ParseDuration(spin); err != nil {
					return badInput(fmt.Errorf("--spin: %w", err))
				}
			}
			if cfg.IO, err = goswitch.ParseIOMode(ioMode); err != nil {
				return badInput(fmt.Errorf("--io: %w", err))
			}
			if busyPoll != "" {
				if cfg.BusyPoll, err = time.ParseDuration(busyPoll); err != nil {
					return badInput(fmt.Errorf("--busy-poll: %w", err))
				}
			}
			network, address, err := ValidLoopback(listen)
			if err != nil {
				return badInput(err)
			}
			if cfg.Programs, err = programs(); err != nil {
				return err
			}
			if cfg.Program != "" && cfg.Programs.Lookup(cfg.Program) == nil {
				return badInput(fmt.Errorf("--program %s: the switch runs %v", cfg.Program, cfg.Programs.Names()))
			}
			cfg.Topology = top
			cfg.Log = slog.New(slog.NewTextHandler(stderr, nil))
			return serve(cmd.Context(), cfg, network, address, listen, stderr)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&topoArg, "topology", "", "topology file (or built-in name)")
	fl.StringVar(&cfg.Name, "name", "", "which switch of the topology this is")
	fl.StringVar(&listen, "grpc", "", "P4Runtime address: a Unix socket path, or 127.0.0.1:PORT")
	fl.StringVar(&cfg.Program, "program", "", "data plane to start with (default: the first registered, plain forwarding)")
	fl.Uint64Var(&cfg.Seed, "seed", 1, "seed of injected loss, duplication and reordering")
	fl.Uint64Var(&cfg.DeviceID, "device-id", goswitch.DefaultDeviceID, "P4Runtime device id (0 is valid, as in the P4 tutorials)")
	fl.StringVar(&spin, "spin", "", "busy-poll for timed events this close (e.g. 200us)")
	fl.StringVar(&ioMode, "io", string(goswitch.IOAuto), "port sockets: auto (today afpacket: the least kernel work per frame on veths), afpacket (AF_PACKET receive rings; captures on the switch's own interfaces see every frame) or xdp (AF_XDP)")
	fl.StringVar(&busyPoll, "busy-poll", "", "keep polling the ports this long after frames last moved instead of sleeping (e.g. 50us): fewer wake-ups, a busy core while traffic flows")
	return cmd
}

// serve runs the switch and its P4Runtime server until ctx ends, then
// prints the port counters.
func serve(ctx context.Context, cfg goswitch.Config, network, address, listen string, stderr io.Writer) error {
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
			fmt.Fprintf(stderr, "port %d (%s): rx %d frames, tx %d, queue drops %d, lost %d, errors %d, max queue %d B\n",
				i+1, p.IO, p.RxPackets, p.TxPackets, p.QueueDrops, p.Lost, p.RxOversize+p.RxErrors+p.TxErrors+p.RxKernelDrops, p.MaxQueueBytes)
		}
	}
	return err
}

// ValidLoopback reports whether a --grpc address only listens inside the
// namespace: a Unix socket, or a TCP address on a loopback address. It
// returns the network and address to listen on.
func ValidLoopback(addr string) (network, address string, err error) {
	if strings.HasPrefix(addr, "unix://") || strings.HasPrefix(addr, "/") || strings.HasPrefix(addr, ".") {
		return "unix", strings.TrimPrefix(addr, "unix://"), nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", "", fmt.Errorf("--grpc %s: want a Unix socket path or HOST:PORT: %w", addr, err)
	}
	ip, err := netip.ParseAddr(host)
	if host == "localhost" {
		ip, err = netip.MustParseAddr("127.0.0.1"), nil
	}
	if err != nil || !ip.IsLoopback() {
		return "", "", fmt.Errorf("--grpc %s: the P4Runtime server listens on a Unix socket or a loopback address only", addr)
	}
	return "tcp", net.JoinHostPort(ip.String(), strings.TrimPrefix(addr, host+":")), nil
}

// ChildEnv is set (to "1") in the environment of the switch processes
// Start starts.
const ChildEnv = "TRACEBED_SWITCH_PROCESS"

// Main makes a test binary act as a switch process: when this process was
// started by Start (ChildEnv is set and the first argument is "switch") it
// runs the switch command over programs with the process's arguments and
// exits; otherwise it returns at once. Call it first thing in the TestMain
// of a package whose tests start switches (bring up a netns testbed):
//
//	func TestMain(m *testing.M) {
//		switchcmd.Main(programs.Registry)
//		os.Exit(m.Run())
//	}
//
// The tracebed binary needs no call: it has the switch command.
func Main(programs Registry) {
	if os.Getenv(ChildEnv) == "" || len(os.Args) < 2 || os.Args[1] != "switch" {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	cmd := Command(os.Stderr, programs)
	cmd.SetArgs(os.Args[2:])
	cmd.SilenceUsage = true
	err := cmd.ExecuteContext(ctx)
	stop()
	switch {
	case err == nil:
		os.Exit(0)
	case IsInputError(err):
		os.Exit(2)
	default:
		os.Exit(1)
	}
}
