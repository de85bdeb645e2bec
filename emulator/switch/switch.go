//go:build linux && !nonetns

package goswitch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"

	"golang.org/x/sys/unix"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/dataplane"
	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/topologies"
)

// DefaultDeviceID is the P4Runtime device id tracebed's commands give
// their switches.
const DefaultDeviceID = 1

// Batch is the most frames the switch moves per system call.
const Batch = 64

// BufSize is the smallest size of a frame buffer: an Ethernet frame of a
// 1500-byte MTU fits, with room for VLAN tags. On ports with a larger MTU
// (jumbo frames) the buffers grow to fit (Config.MaxFrame). Longer frames
// are dropped and counted.
const BufSize = 2048

// frameOverhead is what an Ethernet frame adds to its MTU-sized payload:
// the header and two VLAN tags.
const frameOverhead = 14 + 8

// Config describes one Go switch.
type Config struct {
	// Topology and Name select the switch; its ports are the topology's.
	Topology *topologies.Topology
	Name     string
	// Programs are the pipelines the switch can run; Program names the
	// one it starts with (empty: the registry's default).
	Programs *dataplane.Registry
	Program  string
	// Seed seeds the link impairments (loss, duplication, reordering).
	Seed uint64
	// DeviceID is the P4Runtime device id, used as given: 0 is a valid id
	// (the P4 tutorials number their switches from 0). tracebed's commands
	// use DefaultDeviceID.
	DeviceID uint64
	// Open opens a port; nil means the port's interface in the calling
	// thread's network namespace, through IO.
	Open func(p *topologies.Port) (PortIO, error)
	// IO selects the ports' sockets when Open is nil: IOAuto (the
	// default: AF_PACKET rings), AF_XDP or AF_PACKET.
	IO IOMode
	// Log receives warnings; nil discards them.
	Log *slog.Logger
	// MaxFrame is the longest frame the switch accepts, in bytes; longer
	// ones are dropped and counted (RxOversize). Zero means the largest
	// MTU of the switch's interfaces plus the Ethernet header (at least
	// BufSize), or BufSize when Open is set.
	MaxFrame int
	// Spin makes the data plane busy-poll instead of sleeping when its
	// next timed event (a paced frame, a delayed frame) is at most this
	// far away: timing then follows the wall clock to microseconds, at
	// the cost of a busy core. Zero sleeps, and timing is as precise as
	// the host's timer wake-ups.
	Spin time.Duration
	// BusyPoll keeps the data plane polling its ports without sleeping
	// for this long after frames last moved: a burst's frames are picked
	// up as they arrive, without a wake-up each (on AF_XDP ports without
	// a system call). It costs a busy core while traffic flows. Zero
	// sleeps in poll as soon as nothing is waiting.
	BusyPoll time.Duration
}

// Switch is a running Go switch.
type Switch struct {
	cfg   Config
	node  *topologies.Node
	start time.Time

	ports []*port // indexed by port number; ports[0] is nil

	// Data-plane state, owned by the loop goroutine.
	program  *dataplane.Program
	pipeline emulator.Pipeline
	device   p4rt.Device
	pio      *p4rt.PacketIO           // the running program's controller headers
	staged   *loaded                  // saved by VERIFY_AND_SAVE, running after COMMIT
	notify   atomic.Pointer[notifier] // the P4Runtime server's
	cpuDrops uint64                   // frames to the CPU port nobody took
	pool     [][]byte
	curRx    []byte // the receive buffer the pipeline is looking at
	rxTaken  bool   // the pipeline emitted curRx: it must be replaced
	nowNs    int64  // time of the frame being processed
	panics   uint64
	badPort  uint64
	wakeups  uint64 // poll returns
	moved    uint64 // frames received and sent: activity, for busy polling
	// loopThread is set once Run has locked the data plane to its thread.
	loopThread bool
	ingress    delayLine // frames held back by ingress delay, all ports

	// Control.
	ctl     chan func()
	wakeMu  sync.Mutex // guards wakeFD against use after Run closed it
	wakeFD  int
	running sync.Mutex // held while Run runs
	done    chan struct{}
	log     *slog.Logger
}

// New opens the ports of switch cfg.Name and builds its initial pipeline.
// Sockets are opened in the calling thread's network namespace.
func New(cfg Config) (*Switch, error) {
	node := cfg.Topology.Node(cfg.Name)
	if node == nil || node.IsHost() {
		return nil, fmt.Errorf("switch: %q is not a switch of topology %s", cfg.Name, cfg.Topology.Name)
	}
	if cfg.Programs == nil {
		return nil, errors.New("switch: no programs registered")
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Open == nil {
		mode, err := ParseIOMode(string(cfg.IO))
		if err != nil {
			return nil, fmt.Errorf("switch %s: %w", cfg.Name, err)
		}
		if cfg.MaxFrame == 0 {
			cfg.MaxFrame = maxFrameOf(node)
		}
		maxFrame := max(cfg.MaxFrame, BufSize)
		cfg.Open = func(p *topologies.Port) (PortIO, error) {
			return openPort(mode, p.Iface, maxFrame)
		}
	}
	cfg.MaxFrame = max(cfg.MaxFrame, BufSize)
	s := &Switch{cfg: cfg, node: node, start: time.Now(), ctl: make(chan func(), 64), done: make(chan struct{}), log: log}
	prog := cfg.Programs.Default()
	if cfg.Program != "" {
		prog = cfg.Programs.Lookup(cfg.Program)
	}
	if prog == nil {
		return nil, fmt.Errorf("switch %s: no program %q (have %v)", cfg.Name, cfg.Program, cfg.Programs.Names())
	}
	if err := s.load(prog); err != nil {
		return nil, err
	}
	s.ports = make([]*port, len(node.Ports)+1)
	for _, tp := range node.Ports {
		io, err := cfg.Open(tp)
		if err != nil {
			s.closePorts()
			return nil, fmt.Errorf("switch %s: %w", cfg.Name, err)
		}
		s.ports[tp.Num] = newPort(tp, io, cfg.Seed, node)
	}
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		s.closePorts()
		return nil, fmt.Errorf("switch %s: eventfd: %w", cfg.Name, err)
	}
	s.wakeFD = fd
	return s, nil
}

// loaded is a program built for this switch.
type loaded struct {
	prog *dataplane.Program
	dp   dataplane.Dataplane
}

// build builds prog for this switch, with fresh state and the topology's
// routes.
func (s *Switch) build(prog *dataplane.Program) (*loaded, error) {
	dp, err := prog.New(s.node, s.cfg.Topology.Routes()[s.node.Name])
	if err != nil {
		return nil, fmt.Errorf("switch %s: program %s: %w", s.cfg.Name, prog.Name, err)
	}
	if ds, ok := dp.(DigestSource); ok {
		ds.SetDigestSink(func(id uint32, cfg *p4v1.DigestEntry_Config, data *p4v1.P4Data) {
			if n := s.notify.Load(); n != nil {
				n.digest(id, cfg, data)
			}
		})
	}
	return &loaded{prog, dp}, nil
}

// load builds prog for this switch and makes it the running pipeline.
func (s *Switch) load(prog *dataplane.Program) error {
	l, err := s.build(prog)
	if err != nil {
		return err
	}
	s.run(l)
	return nil
}

// notifier is where the data plane's messages to the controller go: the
// P4Runtime server. Both functions run on the data-plane goroutine and
// must not block.
type notifier struct {
	packetIn func(frame []byte)
	digest   func(id uint32, cfg *p4v1.DigestEntry_Config, data *p4v1.P4Data)
}

// DigestSource is a data plane that sends digests (p4rt.Target does):
// the switch connects it to its P4Runtime server.
type DigestSource interface {
	SetDigestSink(func(id uint32, cfg *p4v1.DigestEntry_Config, data *p4v1.P4Data))
}

// run makes l the running program (and forgets a staged one).
func (s *Switch) run(l *loaded) {
	s.program, s.pipeline, s.device = l.prog, l.dp, l.dp
	s.pio = p4rt.NewPacketIO(l.prog.P4Info)
	s.staged = nil
}

// controlDevice is the device reads and writes go to: the staged
// program's between VERIFY_AND_SAVE and COMMIT (P4Runtime §14), the
// running one's otherwise.
func (s *Switch) controlDevice() p4rt.Device {
	if s.staged != nil {
		return s.staged.dp
	}
	return s.device
}

// release frees the ports and descriptors of a switch whose Run was never
// called.
func (s *Switch) release() {
	s.closePorts()
	s.wakeMu.Lock()
	if s.wakeFD >= 0 {
		unix.Close(s.wakeFD)
		s.wakeFD = -1
	}
	s.wakeMu.Unlock()
}

func (s *Switch) closePorts() {
	for _, p := range s.ports {
		if p != nil {
			p.io.Close()
		}
	}
}

// Name returns the switch's node name.
func (s *Switch) Name() string { return s.node.Name }

// Node returns the switch's topology node.
func (s *Switch) Node() *topologies.Node { return s.node }

// now returns the time since the switch started, in nanoseconds.
func (s *Switch) now() int64 { return int64(time.Since(s.start)) }

// Run runs the data plane until ctx is done, then closes the ports. It
// must be called once.
func (s *Switch) Run(ctx context.Context) error {
	if !s.running.TryLock() {
		return errors.New("switch: Run called twice")
	}
	defer close(s.done)
	defer s.closePorts()
	defer func() {
		s.wakeMu.Lock()
		unix.Close(s.wakeFD)
		s.wakeFD = -1
		s.wakeMu.Unlock()
	}()
	// One OS thread with fine timer slack: pacing sleeps are microseconds.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	s.loopThread = true
	unix.Prctl(unix.PR_SET_TIMERSLACK, 1000, 0, 0, 0)

	stop := context.AfterFunc(ctx, s.wake)
	defer stop()

	// fds: the wake-up eventfd, each port's descriptor, then each port's
	// separate send descriptor (a sendPoller's; -1, ignored, otherwise),
	// polled for POLLOUT while the port is blocked.
	nports := len(s.ports) - 1
	fds := make([]unix.PollFd, 0, 1+2*nports)
	fds = append(fds, unix.PollFd{Fd: int32(s.wakeFD), Events: unix.POLLIN})
	for _, p := range s.ports[1:] {
		fds = append(fds, unix.PollFd{Fd: int32(p.io.FD()), Events: unix.POLLIN})
	}
	for _, p := range s.ports[1:] {
		fd := -1
		if sp, ok := p.io.(sendPoller); ok {
			fd = sp.SendFD()
		}
		fds = append(fds, unix.PollFd{Fd: int32(fd)})
	}
	sendfds := fds[1+nports:]
	bufs := make([][]byte, Batch)
	lens := make([]int, Batch)
	for i := range bufs {
		bufs[i] = s.getBuf()
	}
	busyPoll := int64(s.cfg.BusyPoll)
	lastBusy := int64(math.MinInt64 / 2) // when frames last moved
	for {
		if ctx.Err() != nil {
			s.drainControl()
			return nil
		}
		now := s.now()
		polling := now-lastBusy < busyPoll
		if !polling || !s.spinPoll(fds) {
			wait := s.nextEvent(now)
			for i, p := range s.ports[1:] {
				fds[i+1].Events = unix.POLLIN
				sendfds[i].Events = 0
				switch {
				case p.blocked && sendfds[i].Fd >= 0:
					sendfds[i].Events = unix.POLLOUT
				case p.blocked:
					fds[i+1].Events |= unix.POLLOUT
				}
			}
			var ts *unix.Timespec
			if wait >= 0 || polling {
				spin := int64(s.cfg.Spin)
				switch {
				case polling || wait <= spin:
					wait = 0
				case spin > 0:
					wait -= spin // wake early, then spin
				}
				t := unix.NsecToTimespec(wait)
				ts = &t
			}
			if _, err := unix.Ppoll(fds, ts, nil); err != nil && err != unix.EINTR {
				return fmt.Errorf("switch %s: poll: %w", s.cfg.Name, err)
			}
			s.wakeups++
		}
		if fds[0].Revents&unix.POLLIN != 0 {
			var b [8]byte
			unix.Read(s.wakeFD, b[:])
			s.drainControl()
		}
		moved := s.moved
		now = s.now()
		for i, p := range s.ports[1:] {
			if (fds[i+1].Revents|sendfds[i].Revents)&unix.POLLOUT != 0 {
				p.blocked = false
			}
			if fds[i+1].Revents&(unix.POLLIN|unix.POLLERR) == 0 {
				continue
			}
			// Read at most a few batches per port per round, so one
			// busy port cannot starve the others or the egress.
			for range 4 {
				n, err := p.io.Recv(bufs, lens)
				if err != nil {
					p.stats.RxErrors++
					break
				}
				for j := range n {
					s.receive(now, p, bufs[j], lens[j])
					if s.rxTaken {
						bufs[j] = s.getBuf()
						s.rxTaken = false
					}
				}
				if n < len(bufs) {
					break
				}
			}
		}
		s.service(s.now())
		if s.moved != moved {
			lastBusy = now
		}
	}
}

// readier is a PortIO that can tell whether frames wait without a system
// call (an AF_XDP socket: its receive ring is shared memory).
type readier interface{ Ready() bool }

// spinPoll is one round of busy polling: it fills the poll results of fds
// from the ports' receive rings and the control queue without a system
// call, and reports whether it could (every port is a readier and none
// waits to send).
func (s *Switch) spinPoll(fds []unix.PollFd) bool {
	for _, p := range s.ports[1:] {
		if _, ok := p.io.(readier); !ok || p.blocked {
			return false
		}
	}
	fds[0].Revents = 0
	if len(s.ctl) > 0 {
		fds[0].Revents = unix.POLLIN
	}
	for i, p := range s.ports[1:] {
		fds[i+1].Revents = 0
		if p.io.(readier).Ready() {
			fds[i+1].Revents = unix.POLLIN
		}
	}
	for i := range len(s.ports) - 1 {
		fds[len(s.ports)+i].Revents = 0
	}
	return true
}

// sendPoller is a PortIO that sends through a descriptor other than FD
// (an AF_XDP port sends through AF_PACKET): the switch polls SendFD for
// POLLOUT when Send reported the socket full.
type sendPoller interface{ SendFD() int }

// wake interrupts the loop's poll.
func (s *Switch) wake() {
	s.wakeMu.Lock()
	defer s.wakeMu.Unlock()
	if s.wakeFD >= 0 {
		var one = [8]byte{1}
		unix.Write(s.wakeFD, one[:])
	}
}

func (s *Switch) drainControl() {
	for {
		select {
		case f := <-s.ctl:
			f()
		default:
			return
		}
	}
}

// ErrStopped is returned by Do once the switch has stopped.
var ErrStopped = errors.New("switch stopped")

// Do runs f on the data-plane goroutine, between packet batches, and waits
// for it. f may use the pipeline and device freely.
func (s *Switch) Do(ctx context.Context, f func()) error {
	ran := make(chan struct{})
	select {
	case s.ctl <- func() { f(); close(ran) }:
	case <-s.done:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
	s.wake()
	select {
	case <-ran:
		return nil
	case <-s.done:
		// Run drains the control queue before it returns.
		select {
		case <-ran:
			return nil
		default:
			return ErrStopped
		}
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Inject runs the pipeline on frame as if it arrived on port in (the CPU
// port for a packet-out), on the data-plane goroutine.
func (s *Switch) Inject(ctx context.Context, in int, frame []byte) error {
	return s.Do(ctx, func() { s.process(s.now(), in, frame, true) })
}

// receive handles one frame of length n read into buf on port p.
func (s *Switch) receive(now int64, p *port, buf []byte, n int) {
	s.rxTaken = false
	p.stats.RxPackets++
	p.stats.RxBytes += uint64(n)
	s.moved++
	if n > len(buf) {
		p.stats.RxOversize++
		return
	}
	f := buf[:n]
	if p.in.active() {
		// Link impairments of the host-to-switch direction, and the
		// switch's own pipeline latency.
		if p.in.loss > 0 && p.in.rng.Float64() < p.in.loss {
			p.stats.Lost++
			return
		}
		if p.in.delay > 0 {
			c := s.getBuf()[:n]
			copy(c, f)
			s.ingress.push(pkt{data: c, at: now + p.in.delay, port: p.num})
			if p.in.dup > 0 && p.in.rng.Float64() < p.in.dup {
				d := s.getBuf()[:n]
				copy(d, f)
				p.stats.Duplicated++
				s.ingress.push(pkt{data: d, at: now + p.in.delay, port: p.num})
			}
			return
		}
		if p.in.dup > 0 && p.in.rng.Float64() < p.in.dup {
			d := s.getBuf()[:n]
			copy(d, f)
			p.stats.Duplicated++
			s.process(now, p.num, d, true)
		}
	}
	s.process(now, p.num, f, false)
}

// process runs the pipeline on frame f that arrived on port in. When owned
// is true f is the switch's own copy, returned to the pool unless the
// pipeline emitted it; otherwise f lives in a receive buffer and s.rxTaken
// tells the caller whether the pipeline kept it.
func (s *Switch) process(now int64, in int, f []byte, owned bool) {
	s.curRx = f[:cap(f)]
	s.rxTaken = false
	s.nowNs = now
	defer func() {
		s.curRx = nil
		if r := recover(); r != nil {
			// A pipeline bug must not take the switch down: count it,
			// report the first few.
			s.panics++
			if s.panics <= 10 {
				s.log.Error("pipeline panic; frame dropped", "switch", s.cfg.Name, "program", s.program.Name, "panic", r)
			}
		}
		if owned && !s.rxTaken {
			s.putBuf(f)
		}
	}()
	s.pipeline.Process(time.Duration(now), in, f, s)
}

// Emit implements emulator.Emitter: it queues frame on an egress port.
func (s *Switch) Emit(port, prio int, frame []byte) {
	if s.curRx != nil && aliases(frame, s.curRx) {
		// Tell the caller the pipeline kept its receive buffer.
		s.rxTaken = true // the queue owns the receive buffer now
	}
	if port == emulator.CPUPort {
		n := s.notify.Load()
		if n == nil {
			s.cpuDrops++
			return
		}
		n.packetIn(append([]byte(nil), frame...)) // the receive buffer goes back to the pool
		return
	}
	if port <= 0 || port >= len(s.ports) || len(frame) == 0 {
		s.badPort++
		return
	}
	s.ports[port].enqueue(s.nowNs, prio, frame, s)
}

// aliases reports whether a and b share their backing array.
func aliases(a, b []byte) bool {
	if cap(a) == 0 || cap(b) == 0 {
		return false
	}
	a0 := uintptr(unsafe.Pointer(unsafe.SliceData(a)))
	b0 := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return a0 >= b0 && a0 < b0+uintptr(cap(b))
}

func (s *Switch) getBuf() []byte {
	if k := len(s.pool); k > 0 {
		b := s.pool[k-1]
		s.pool = s.pool[:k-1]
		return b[:s.cfg.MaxFrame]
	}
	return make([]byte, s.cfg.MaxFrame)
}

// NewFrame implements emulator.FramePool: an empty buffer from the
// switch's pool with room for n bytes (a new one if n is larger than
// Config.MaxFrame). Pipelines build the frames they generate in it (an INA
// result's multicast copies, for one); emitted, it comes back to the pool
// once sent or dropped, so generating frames allocates nothing on the data
// plane's hot path. It must be called from the data-plane goroutine (a
// pipeline's Process, or a function run by Do).
func (s *Switch) NewFrame(n int) []byte {
	if n > s.cfg.MaxFrame {
		return make([]byte, 0, n)
	}
	return s.getBuf()[:0]
}

// maxFrameOf returns the longest frame the interfaces of node's ports in
// the calling thread's namespace carry; BufSize if none is found.
func maxFrameOf(node *topologies.Node) int {
	size := BufSize
	for _, p := range node.Ports {
		if ifi, err := net.InterfaceByName(p.Iface); err == nil {
			size = max(size, ifi.MTU+frameOverhead)
		}
	}
	return size
}

// putBuf returns a frame buffer for reuse; buffers of other sizes (frames
// a pipeline made itself) are left to the garbage collector.
func (s *Switch) putBuf(b []byte) {
	if cap(b) == s.cfg.MaxFrame && len(s.pool) < 4096 {
		s.pool = append(s.pool, b[:s.cfg.MaxFrame])
	}
}

// service releases frames whose ingress delay has passed, moves frames from
// the egress queues onto the wire as pacing allows and transmits those
// whose propagation delay has passed.
func (s *Switch) service(now int64) {
	for {
		p, ok := s.ingress.pop(now)
		if !ok {
			break
		}
		s.process(now, p.port, p.data, true)
	}
	for _, p := range s.ports[1:] {
		p.service(now, s)
	}
}

// nextEvent returns how long the loop may sleep, in nanoseconds (-1:
// until a frame or a control call arrives).
func (s *Switch) nextEvent(now int64) int64 {
	next := int64(-1)
	consider := func(t int64) {
		if t < 0 {
			return
		}
		if d := max(t-now, 0); next < 0 || d < next {
			next = d
		}
	}
	consider(s.ingress.next())
	for _, p := range s.ports[1:] {
		consider(p.nextEvent())
	}
	return next
}

// rng returns a seeded source for one direction of one port.
func rng(seed uint64, node, port, dir int) *rand.Rand {
	return rand.New(rand.NewPCG(seed, uint64(node)<<32|uint64(port)<<1|uint64(dir)+0x7377))
}

// transmitPS is the serialization time of n bytes at rate, in picoseconds.
func transmitPS(n int, rate units.Rate) int64 {
	if rate <= 0 {
		return 0
	}
	return units.TransmitTime(units.Bytes(n), rate)
}
