//go:build linux && !nonetns

// Package netnstb is the testbed of the netns substrate: a topology brought
// up on the real Linux network stack (package emulator/netns), one switch
// process per topology switch — the Go switch ('tracebed switch', package
// emulator/switch/switchcmd) or bmv2's simple_switch_grpc (package
// emulator/bmv2) — programmed over P4Runtime gRPC, and agents on UDP
// sockets inside their hosts' namespaces with the wall clock (package
// emulator/live).
//
// It implements testbed.Testbed, so an experiment written for the
// simulation runs here unchanged; see package emulator/testbed for the
// rules. Time is wall time: runs take as long as they emulate, and one
// testbed at a time keeps the machine's cores for it.
//
// Everything a testbed creates — namespaces, veths, switch processes,
// sockets, the run directory — is removed by Close, which also runs when the
// context given to New ends (Ctrl-C); a process killed outright leaves
// namespaces that 'tracebed cleanup' (netns.Cleanup) removes, and its
// switch processes die with it (parent-death signal).
//
// A test binary that brings a testbed up with Go switches must call
// switchcmd.Main first in its TestMain: the switch processes are that
// binary, started as 'switch'.
package netnstb

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	"golang.org/x/sys/unix"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/bmv2"
	"github.com/tracebed/tracebed/emulator/live"
	"github.com/tracebed/tracebed/emulator/netns"
	"github.com/tracebed/tracebed/emulator/netns/mininet"
	"github.com/tracebed/tracebed/emulator/p4rt"
	goswitch "github.com/tracebed/tracebed/emulator/switch"
	"github.com/tracebed/tracebed/emulator/switch/switchcmd"
	"github.com/tracebed/tracebed/emulator/testbed"
	"github.com/tracebed/tracebed/internal/logtail"
	"github.com/tracebed/tracebed/topologies"
)

// DefaultMTU is the links' MTU unless Options.MTU says otherwise: jumbo
// frames, so that one datagram of a far-memory page (4162-byte frames) or
// a large INA packet is one frame, as on the data-centre networks the
// experiments model.
const DefaultMTU = netns.MaxMTU

// SocketBuffer is the receive and send buffer of every agent's socket
// (set past the sysctl limits): a window of a few thousand datagrams fits
// before the kernel drops.
const SocketBuffer = 4 << 20

// Testbed is a topology running on network namespaces. It implements
// testbed.Testbed. Its methods may be called from one driver goroutine;
// Close may also be called from any goroutine, any number of times.
type Testbed struct {
	cfg  testbed.Config
	opts Options
	net  *netns.Network

	borrowed bool             // Open: the network is someone else's
	mn       *mininet.Process // Mininet, when it built the network
	switches *switchcmd.Set   // the Go switch or bmv2 processes
	stages   *bmv2.Stages     // the links of the bmv2 switches
	clients  map[string]*p4rt.GRPC
	rt       *live.Runtime

	mu       sync.Mutex
	bound    map[emulator.Addr]bool
	failed   error          // a switch died
	captures []func() error // stops of the captures running

	closing   chan struct{} // closed when Close starts
	closed    chan struct{} // closed when Close is done
	closeOnce sync.Once
	closeErr  error
	stopWatch func() bool
}

// Factory builds the testbeds of an execution (its New has the type of
// experiments.TestbedFactory) and keeps track of them, so that the
// command can make sure, once the runs are over, that every one of them
// was closed — even those of a run that failed without closing its
// testbed.
type Factory struct {
	opts Options
	mu   sync.Mutex
	open map[*Testbed]bool
}

// NewFactory returns a factory of netns testbeds built with opts.
func NewFactory(opts Options) *Factory {
	return &Factory{opts: opts, open: map[*Testbed]bool{}}
}

// New builds a testbed (see the function New).
func (f *Factory) New(ctx context.Context, cfg testbed.Config) (testbed.Testbed, error) {
	t, err := New(ctx, cfg, f.opts)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.open[t] = true
	f.mu.Unlock()
	return t, nil
}

// Close closes every testbed the factory built (those already closed
// return at once) and returns the first error.
func (f *Factory) Close() error {
	f.mu.Lock()
	open := f.open
	f.open = map[*Testbed]bool{}
	f.mu.Unlock()
	var errs []error
	for t := range open {
		if err := t.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Check reports whether a netns testbed with opts can be built here: root,
// and for bmv2 the bmv2 tools. Its error says what is missing and how to
// get it.
func Check(opts Options) error {
	if os.Geteuid() != 0 {
		return errors.New("the netns substrate needs root (network namespaces, veth links, raw sockets): run it with sudo, or use --substrate sim")
	}
	switch opts.Network {
	case "", NetworkNetns:
	case NetworkMininet:
		if err := mininet.Available(); err != nil {
			return err
		}
	default:
		return fmt.Errorf("network %q: want one of %s", opts.Network, strings.Join(Networks, ", "))
	}
	if _, err := goswitch.ParseIOMode(opts.SwitchIO); err != nil {
		return err
	}
	switch opts.Switch {
	case "", SwitchGo:
		return nil
	case SwitchBMv2:
		_, err := bmv2.FindTools(opts.BMv2)
		return err
	}
	return fmt.Errorf("switch %q: want one of %s", opts.Switch, strings.Join(Switches, ", "))
}

// New brings cfg up: namespaces and links, a switch per topology switch
// running cfg.Program (loaded over P4Runtime with SetForwardingPipelineConfig),
// and an agent runtime whose clock starts as New returns. On error, and
// when ctx ends before Close, everything is torn down.
func New(ctx context.Context, cfg testbed.Config, opts Options) (_ *Testbed, err error) {
	if cfg.Topology == nil {
		return nil, errors.New("netnstb: no topology")
	}
	prog := cfg.Program
	if prog == nil {
		return nil, errors.New("netnstb: Config.Program is nil: the switches need a data plane")
	}
	if err := Check(opts); err != nil {
		return nil, err
	}
	if opts.Switch == "" {
		opts.Switch = SwitchGo
	}
	if opts.MTU == 0 {
		opts.MTU = DefaultMTU
	}
	if opts.RunID == "" && opts.RunIDPrefix != "" {
		opts.RunID = netns.TestRunID(opts.RunIDPrefix)
	}
	t := &Testbed{cfg: cfg, opts: opts, clients: map[string]*p4rt.GRPC{}, bound: map[emulator.Addr]bool{},
		closing: make(chan struct{}), closed: make(chan struct{})}
	defer func() {
		if err != nil {
			t.Close()
		}
	}()
	// bmv2 routes without rewriting Ethernet addresses (fwd.p4,
	// farmem.p4): hosts address each other directly.
	l2 := opts.L2Hosts || opts.Switch == SwitchBMv2
	if opts.Network == NetworkMininet {
		var out bytes.Buffer
		t.mn, err = mininet.Start(ctx, cfg.Topology, mininet.Options{RunID: opts.RunID, Switch: mininet.SwitchNone, MTU: opts.MTU,
			NoShaping: opts.NoShaping, L2Hosts: l2, Wait: true, Quiet: true, Stdout: &out, Stderr: &out})
		if err != nil {
			return nil, fmt.Errorf("netnstb: %w\n%s", err, out.Bytes())
		}
		t.net = t.mn.Net
		if err := t.mn.Continue(); err != nil {
			return nil, fmt.Errorf("netnstb: %w", err)
		}
	} else {
		t.net, err = netns.Up(ctx, cfg.Topology, netns.Options{RunID: opts.RunID, MTU: opts.MTU, NoShaping: opts.NoShaping, L2Hosts: l2})
		if err != nil {
			return nil, err
		}
	}
	sockets := map[string]string{}
	var info *p4configv1.P4Info
	var deviceConfig []byte
	var deviceID uint64
	switch opts.Switch {
	case SwitchGo:
		t.switches, err = switchcmd.Start(t.net, switchcmd.Options{Executable: opts.Executable, Program: prog.Name, Seed: cfg.Seed, Spin: opts.Spin, IO: goswitch.IOMode(opts.SwitchIO)})
		if err != nil {
			return nil, err
		}
		for _, p := range t.switches.Procs {
			sockets[p.Name] = p.Socket
		}
		info, deviceID = prog.P4Info, 1
	case SwitchBMv2:
		compiled, err := bmv2.Compile(ctx, prog, opts.BMv2)
		if err != nil {
			return nil, err
		}
		bopts := opts.BMv2
		if bopts.CPUPort == 0 {
			bopts.CPUPort = emulator.CPUPort // fwd.p4's and farmem.p4's packet I/O
		}
		if !bopts.DirectLinks {
			// bmv2 models no link: delay, loss and pacing are the
			// link stages' (the Go switch's port model).
			if t.stages, err = bmv2.StartStages(t.net, cfg.Seed); err != nil {
				return nil, err
			}
		}
		t.switches, err = bmv2.Start(ctx, t.net, bopts)
		if err != nil {
			return nil, err
		}
		for _, p := range t.switches.Procs {
			sockets[p.Name] = p.Socket
		}
		info, deviceConfig, deviceID = compiled.P4Info, compiled.JSON, bmv2.DeviceID
	}
	for _, sw := range cfg.Topology.Switches() {
		c, err := p4rt.Dial(ctx, sockets[sw.Name], p4rt.DialOptions{DeviceID: deviceID})
		if err != nil {
			return nil, fmt.Errorf("netnstb: switch %s: %w", sw.Name, err)
		}
		t.clients[sw.Name] = c
		if err := c.SetPipeline(ctx, info, deviceConfig, 1); err != nil {
			return nil, fmt.Errorf("netnstb: switch %s: %w", sw.Name, err)
		}
		if opts.Switch == SwitchBMv2 {
			if err := bmv2.Configure(ctx, c, cfg.Topology, sw, prog); err != nil {
				return nil, fmt.Errorf("netnstb: switch %s: %w", sw.Name, err)
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	t.rt = live.New(cfg.Seed)
	// From now on, Ctrl-C (any end of ctx) tears the testbed down, even
	// if the driver is stuck.
	t.stopWatch = context.AfterFunc(ctx, func() { t.Close() })
	return t, nil
}

// Open returns a testbed on a network that is already up — brought up by
// 'tracebed topo up' or 'tracebed mininet' and found with package
// emulator/netns/lab — whose switches serve P4Runtime on sockets (by switch
// name) with device id deviceID. Agents attach to its hosts and controllers
// program its switches (as primary, election id 1) as on a testbed of New;
// Close stops the agents and the clients and leaves the network and its
// switches up. cfg.Topology must be the network's.
func Open(ctx context.Context, cfg testbed.Config, n *netns.Network, sockets map[string]string, deviceID uint64) (_ *Testbed, err error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("netnstb: a running topology needs root")
	}
	t := &Testbed{cfg: cfg, opts: Options{Switch: SwitchGo, MTU: n.MTU}, net: n, borrowed: true, clients: map[string]*p4rt.GRPC{},
		bound: map[emulator.Addr]bool{}, closing: make(chan struct{}), closed: make(chan struct{})}
	defer func() {
		if err != nil {
			t.Close()
		}
	}()
	for _, sw := range cfg.Topology.Switches() {
		sock, ok := sockets[sw.Name]
		if !ok {
			return nil, fmt.Errorf("netnstb: switch %s serves no P4Runtime", sw.Name)
		}
		c, err := p4rt.Dial(ctx, sock, p4rt.DialOptions{DeviceID: deviceID})
		if err != nil {
			return nil, fmt.Errorf("netnstb: switch %s: %w", sw.Name, err)
		}
		t.clients[sw.Name] = c
	}
	t.rt = live.New(cfg.Seed)
	t.stopWatch = context.AfterFunc(ctx, func() { t.Close() })
	return t, nil
}

// setSocket gives conn SocketBuffer bytes of receive and send buffer,
// past the sysctl limits (net.core.rmem_max, 208 KiB by default) as root
// may: a window of datagrams in flight must not overflow the receiver's
// socket, which would be a loss the emulated network does not have.
//
// It also sets IP_PMTUDISC_DO, so that the kernel builds the IPv4 header
// the sim substrate builds (emulator/frame): don't-fragment set and
// identification 0. Under the default (IP_PMTUDISC_WANT) Linux also sets
// DF but draws the identification from its shared counters, which a
// protocol that covers it — the RoCEv2 ICRC does — cannot know in
// advance; with DO a DF datagram of a socket with no connected peer gets
// identification 0 (ip_select_ident_segs). A datagram larger than the
// path MTU then fails to send (and is counted lost) instead of leaving in
// IP fragments, which the switches could not classify anyway.
func setSocket(conn *net.UDPConn) error {
	raw, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = raw.Control(func(fd uintptr) {
		for _, opt := range []int{unix.SO_RCVBUFFORCE, unix.SO_SNDBUFFORCE} {
			if e := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, opt, SocketBuffer); e != nil && serr == nil {
				serr = fmt.Errorf("socket buffer: %w", e)
			}
		}
		if e := unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO); e != nil && serr == nil {
			serr = fmt.Errorf("IP_MTU_DISCOVER: %w", e)
		}
	})
	if err != nil {
		return err
	}
	return serr
}

// Substrate implements testbed.Testbed: "netns".
func (t *Testbed) Substrate() string { return "netns" }

// Topology implements testbed.Testbed.
func (t *Testbed) Topology() *topologies.Topology { return t.cfg.Topology }

// Network returns the namespaces the testbed runs in.
func (t *Testbed) Network() *netns.Network { return t.net }

// SwitchKind returns "go" or "bmv2".
func (t *Testbed) SwitchKind() string { return t.opts.Switch }

// MTU returns the MTU of every link: the largest frame, less its Ethernet
// header, that crosses the testbed.
func (t *Testbed) MTU() int { return t.opts.MTU }

// Switch implements testbed.Testbed: the P4Runtime gRPC client of the
// named switch (primary controller, election id 1).
func (t *Testbed) Switch(name string) (p4rt.Client, error) {
	c := t.clients[name]
	if c == nil {
		return nil, fmt.Errorf("netnstb: no switch %q in topology %s", name, t.cfg.Topology.Name)
	}
	return c, nil
}

// Attach implements testbed.Testbed: it opens a UDP socket bound to the
// host's address and udpPort inside the host's namespace and starts agent
// on its own event loop.
func (t *Testbed) Attach(host string, udpPort uint16, agent emulator.Agent) (emulator.Env, error) {
	node := t.cfg.Topology.Node(host)
	if node == nil || !node.IsHost() {
		return nil, fmt.Errorf("netnstb: %q is not a host of topology %s", host, t.cfg.Topology.Name)
	}
	select {
	case <-t.closing:
		return nil, errors.New("netnstb: testbed closed")
	default:
	}
	addr := netip.AddrPortFrom(node.IP, udpPort)
	t.mu.Lock()
	dup := t.bound[addr]
	t.bound[addr] = true
	t.mu.Unlock()
	if dup {
		return nil, fmt.Errorf("netnstb: %s port %d is already attached", host, udpPort)
	}
	var conn *net.UDPConn
	err := t.net.Do(host, func() error {
		var err error
		conn, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(addr))
		if err != nil {
			return err
		}
		return setSocket(conn)
	})
	if err != nil {
		return nil, fmt.Errorf("netnstb: attach %s:%d: %w", host, udpPort, err)
	}
	env, err := t.rt.Attach(conn, agent)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("netnstb: attach %s:%d: %w", host, udpPort, err)
	}
	return env, nil
}

// Inspect implements testbed.Testbed: f runs on env's event loop, between
// the agent's callbacks, and Inspect returns once it has run. After Close
// f runs at once. It must not be called from an agent's callback.
func (t *Testbed) Inspect(env emulator.Env, f func()) {
	e, ok := env.(*live.Env)
	if !ok {
		panic(fmt.Sprintf("netnstb: Inspect of an Env this testbed did not make (%T)", env))
	}
	ran := make(chan struct{})
	if !e.Post(func() { f(); close(ran) }) {
		<-t.closed // the loop has stopped: Close is under way
		f()
		return
	}
	select {
	case <-ran:
	case <-t.closing:
		// The loop may stop before it runs f; once Close is done no
		// callback runs any more.
		<-t.closed
		select {
		case <-ran:
		default:
			f()
		}
	}
}

// Now implements testbed.Testbed: wall time since New returned.
func (t *Testbed) Now() time.Duration { return t.rt.Now() }

// Run implements testbed.Testbed: it sleeps in steps of step (at most) of
// wall time, calling done between them, until done reports true. It fails
// when ctx ends, when the testbed time passes limit, when a switch process
// dies, or when the testbed is closed.
func (t *Testbed) Run(ctx context.Context, step, limit time.Duration, done func() bool) error {
	if step <= 0 {
		step = 10 * time.Millisecond
	}
	var exits <-chan *switchcmd.Process
	if t.switches != nil {
		exits = t.switches.Exit
	}
	var mnExited <-chan struct{}
	if t.mn != nil {
		mnExited = t.mn.Exited()
	}
	for {
		if done() {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		t.mu.Lock()
		failed := t.failed
		t.mu.Unlock()
		if failed != nil {
			return failed
		}
		now := t.Now()
		if now >= limit {
			return fmt.Errorf("%w (%v)", testbed.ErrLimit, limit)
		}
		timer := time.NewTimer(min(step, limit-now))
		select {
		case <-timer.C:
		case <-ctx.Done():
		case <-t.closing:
			timer.Stop()
			return errors.New("netnstb: testbed closed during Run")
		case p := <-exits:
			t.fail(fmt.Errorf("netnstb: %s switch %s exited (%v); its log:\n%s", t.opts.Switch, p.Name, p.Err(), logtail.File(p.Log, 20)))
		case <-mnExited:
			mnExited = nil
			t.fail(errors.New("netnstb: Mininet, which built the network, exited"))
		}
		timer.Stop()
	}
}

func (t *Testbed) fail(err error) {
	t.mu.Lock()
	if t.failed == nil {
		t.failed = err
	}
	t.mu.Unlock()
}

// Close implements testbed.Testbed: it stops the agents (closing their
// sockets), the P4Runtime clients and the switch processes, and removes
// the namespaces, links and run directory. It is safe to call more than
// once and from any goroutine; every call returns the first call's result
// once teardown is complete.
func (t *Testbed) Close() error {
	t.closeOnce.Do(func() {
		close(t.closing)
		if t.stopWatch != nil {
			t.stopWatch()
		}
		var errs []error
		t.mu.Lock()
		captures := t.captures
		t.captures = nil
		t.mu.Unlock()
		for _, stop := range captures {
			if err := stop(); err != nil {
				errs = append(errs, err)
			}
		}
		if t.rt != nil {
			t.rt.Close()
		}
		for _, c := range t.clients {
			c.Close()
		}
		if t.switches != nil {
			t.switches.Stop()
		}
		if t.stages != nil {
			if err := t.stages.Stop(); err != nil {
				errs = append(errs, fmt.Errorf("netnstb: link stages: %w", err))
			}
		}
		if t.borrowed {
			// Open: the network and its switches stay up.
		} else if t.mn != nil {
			if err := t.mn.Stop(); err != nil {
				errs = append(errs, fmt.Errorf("netnstb: teardown of Mininet run %s: %w", t.mn.RunID, err))
			}
		} else if t.net != nil {
			if err := t.net.Down(); err != nil {
				errs = append(errs, fmt.Errorf("netnstb: teardown of run %s: %w", t.net.RunID, err))
			}
		}
		t.closeErr = errors.Join(errs...)
		close(t.closed)
	})
	<-t.closed
	return t.closeErr
}

// Capture implements testbed.Capturer: an AF_PACKET capture of the port's
// interface inside the node's namespace (netns.Network.Capture), both
// directions, wall-clock timestamps. Close stops the captures still
// running before it tears the namespaces down.
func (t *Testbed) Capture(node string, num int, w io.Writer) (func() error, error) {
	n := t.cfg.Topology.Node(node)
	if n == nil || num < 1 || num > len(n.Ports) {
		return nil, fmt.Errorf("netnstb: capture: no port %s:%d", node, num)
	}
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := t.net.Capture(ctx, node, n.Ports[num-1].Iface, w, netns.CaptureOptions{Started: func() { close(started) }})
		done <- err
	}()
	select {
	case <-started:
	case err := <-done:
		cancel()
		return nil, err
	}
	var once sync.Once
	var result error
	stop := func() error {
		once.Do(func() {
			cancel()
			result = <-done
		})
		return result
	}
	t.mu.Lock()
	t.captures = append(t.captures, stop)
	t.mu.Unlock()
	return stop, nil
}

var _ testbed.Testbed = (*Testbed)(nil)
var _ testbed.Capturer = (*Testbed)(nil)
