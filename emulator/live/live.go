//go:build linux && !nonetns

package live

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

	"github.com/tracebed/tracebed/emulator"
)

// Runtime owns the loops of a run. Its zero value is not usable; call New.
type Runtime struct {
	start time.Time
	seed  uint64

	mu     sync.Mutex
	loops  []*Loop
	conns  []*net.UDPConn
	closed bool
	wg     sync.WaitGroup

	timers timerQueue // the loops' timers (timers.go)

	// ctx ends when the runtime closes: the context of the loops' calls
	// (Loop.Call) derives from it.
	ctx    context.Context
	cancel context.CancelFunc
}

// New returns a runtime whose clock starts now. Agents' random sources are
// seeded from seed and their addresses.
func New(seed uint64) *Runtime {
	ctx, cancel := context.WithCancel(context.Background())
	return &Runtime{start: time.Now(), seed: seed, ctx: ctx, cancel: cancel}
}

// Now returns the time since the runtime started.
func (r *Runtime) Now() time.Duration { return time.Since(r.start) }

// queueLen is how many events a loop buffers before its producers wait.
const queueLen = 4096

// Loop is an event loop: functions posted to it run one at a time, in order,
// on its own goroutine.
type Loop struct {
	rt     *Runtime
	events chan func()
	quit   chan struct{}
	once   sync.Once
	after  func() // runs after each callback (an agent's batched sends)

	// The loop's calls (Call), in the order they were made, and whether
	// a goroutine is running them.
	callMu  sync.Mutex
	calls   []call
	calling bool
}

// call is one Loop.Call.
type call struct {
	op   func(ctx context.Context) error
	done func(err error)
}

// NewLoop starts an event loop that is not tied to a socket, for
// controllers and drivers that need the same serialization as agents.
func (r *Runtime) NewLoop() (*Loop, error) { return r.newLoop(nil) }

// newLoop starts a loop that calls after at the end of every callback.
func (r *Runtime) newLoop(after func()) (*Loop, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, errors.New("live: runtime closed")
	}
	l := &Loop{rt: r, events: make(chan func(), queueLen), quit: make(chan struct{}), after: after}
	r.loops = append(r.loops, l)
	r.wg.Add(1)
	go l.run()
	return l, nil
}

func (l *Loop) run() {
	defer l.rt.wg.Done()
	for {
		select {
		case f := <-l.events:
			f()
			if l.after != nil {
				l.after()
			}
		case <-l.quit:
			return
		}
	}
}

// Post queues f to run on the loop. It reports false, dropping f, once the
// loop has stopped. Post may be called from any goroutine; from the loop
// itself it must not be called more than queueLen times in one callback.
func (l *Loop) Post(f func()) bool {
	select {
	case <-l.quit:
		return false
	default:
	}
	select {
	case l.events <- f:
		return true
	case <-l.quit:
		return false
	}
}

func (l *Loop) stop() { l.once.Do(func() { close(l.quit) }) }

// Now returns the runtime's clock.
func (l *Loop) Now() time.Duration { return l.rt.Now() }

// Call implements emulator.Caller: op runs on a goroutine of the loop's
// own, with a context that ends after emulator.CallTimeout or when the
// runtime closes, and done is posted to the loop when op returns. The
// loop's calls run one at a time, in the order they were made; Call never
// waits for one. Like After, it is called from the loop's goroutine.
func (l *Loop) Call(op func(ctx context.Context) error, done func(err error)) {
	l.callMu.Lock()
	defer l.callMu.Unlock()
	l.calls = append(l.calls, call{op, done})
	if l.calling {
		return
	}
	l.rt.mu.Lock()
	closed := l.rt.closed
	if !closed {
		l.rt.wg.Add(1)
	}
	l.rt.mu.Unlock()
	if closed {
		l.calls = nil // the loop has stopped: done would be dropped
		return
	}
	l.calling = true
	go l.runCalls()
}

// runCalls runs the loop's calls until none is left.
func (l *Loop) runCalls() {
	defer l.rt.wg.Done()
	for {
		l.callMu.Lock()
		if len(l.calls) == 0 {
			l.calling = false
			l.callMu.Unlock()
			return
		}
		c := l.calls[0]
		l.calls[0] = call{}
		l.calls = l.calls[1:]
		l.callMu.Unlock()
		ctx, cancel := context.WithTimeout(l.rt.ctx, emulator.CallTimeout)
		err := c.op(ctx)
		cancel()
		l.Post(func() { c.done(err) })
	}
}

// After runs f on the loop once d has elapsed, unless the returned timer is
// stopped first. Stop must be called from the loop's goroutine. The
// runtime's timer thread keeps the time (timers.go): f is posted to the
// loop as soon as the kernel wakes that thread after d, not at the
// millisecond granularity of Go's own timers.
func (l *Loop) After(d time.Duration, f func()) emulator.Timer {
	t := &timer{q: &l.rt.timers}
	t.p, _ = t.q.add(max(d, 0), func() {
		l.Post(func() {
			if t.done {
				return
			}
			t.done = true
			f()
		})
	})
	return t
}

// timer's done is only touched on its loop's goroutine.
type timer struct {
	q    *timerQueue
	p    *pending // nil if the runtime was closed
	done bool
}

func (t *timer) Stop() bool {
	if t.done {
		return false
	}
	t.done = true
	if t.p != nil {
		t.q.remove(t.p)
	}
	return true
}

// Env is an agent's environment on a real socket. It implements emulator.Env.
type Env struct {
	*Loop
	conn  *net.UDPConn
	local netip.AddrPort
	rng   *rand.Rand
	agent emulator.Agent

	// Datagrams sent during a callback wait here and leave in one
	// sendmmsg call when the callback returns (or when sendBatch are
	// pending); only the agent's loop touches them.
	pc      *ipv4.PacketConn
	pending []ipv4.Message
	addrs   []net.UDPAddr
	bufs    [][]byte

	mu        sync.Mutex
	sendErrs  uint64
	lastError error
}

// sendBatch is how many datagrams one sendmmsg call may carry.
const sendBatch = 64

// Attach binds agent to conn: it starts the agent's loop, calls Start on it,
// and delivers every datagram conn receives to Recv. conn must be bound to a
// specific IPv4 address (not the wildcard) so that Local is meaningful; the
// runtime closes it when the runtime closes.
func (r *Runtime) Attach(conn *net.UDPConn, agent emulator.Agent) (*Env, error) {
	local, err := netip.ParseAddrPort(conn.LocalAddr().String())
	if err != nil {
		return nil, fmt.Errorf("live: local address %v: %w", conn.LocalAddr(), err)
	}
	var e *Env
	l, err := r.newLoop(func() { e.flush() })
	if err != nil {
		return nil, err
	}
	h := fnv.New64a()
	b, _ := local.MarshalBinary()
	h.Write(b)
	e = &Env{Loop: l, conn: conn, local: local, rng: rand.New(rand.NewPCG(r.seed, h.Sum64())), agent: agent,
		pc: ipv4.NewPacketConn(conn)}
	r.mu.Lock()
	r.conns = append(r.conns, conn)
	r.mu.Unlock()
	l.Post(func() { agent.Start(e) })
	r.wg.Add(1)
	go e.read()
	return e, nil
}

// batch is how many datagrams one recvmmsg call may return.
const batch = 64

// read receives datagrams in batches until the socket is closed.
func (e *Env) read() {
	defer e.rt.wg.Done()
	pc := ipv4.NewPacketConn(e.conn)
	msgs := make([]ipv4.Message, batch)
	for i := range msgs {
		msgs[i].Buffers = [][]byte{make([]byte, 65536)}
	}
	for {
		n, err := pc.ReadBatch(msgs, 0)
		if err != nil {
			return // closed
		}
		for i := range n {
			m := &msgs[i]
			payload := make([]byte, m.N)
			copy(payload, m.Buffers[0][:m.N])
			var from netip.AddrPort
			if ua, ok := m.Addr.(*net.UDPAddr); ok {
				from = ua.AddrPort()
				from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
			}
			if !e.Post(func() { e.agent.Recv(from, payload) }) {
				return
			}
		}
	}
}

// Local implements emulator.Env.
func (e *Env) Local() emulator.Addr { return e.local }

// Rand implements emulator.Env.
func (e *Env) Rand() *rand.Rand { return e.rng }

// Send implements emulator.Env. A failed send (no route, full socket
// buffer) is a lost datagram, as on any best-effort network; it is counted.
//
// Datagrams sent in one callback leave together, in order, in as few
// sendmmsg calls as possible when the callback returns: the cost of a system
// call per datagram is what limits a real host's packet rate here.
func (e *Env) Send(to emulator.Addr, payload []byte) {
	e.SendGather(to, payload, nil, nil)
}

// SendGather implements emulator.GatherSender: the three parts are copied
// into one buffer of the pending batch, as Send copies its payload.
func (e *Env) SendGather(to emulator.Addr, head, body, tail []byte) {
	i := len(e.pending)
	if i == len(e.bufs) {
		e.bufs = append(e.bufs, nil)
		e.addrs = append(e.addrs, net.UDPAddr{})
	}
	e.bufs[i] = append(append(append(e.bufs[i][:0], head...), body...), tail...)
	a := &e.addrs[i]
	ip := to.Addr().As4()
	a.IP = append(a.IP[:0], ip[:]...)
	a.Port = int(to.Port())
	e.pending = append(e.pending, ipv4.Message{Buffers: [][]byte{e.bufs[i]}, Addr: a})
	if len(e.pending) == sendBatch {
		e.flush()
	}
}

// flush sends the pending datagrams. A datagram the kernel refuses (no
// route, full buffer) is lost, as on any best-effort network, and counted.
func (e *Env) flush() {
	msgs := e.pending
	for len(msgs) > 0 {
		n, err := e.pc.WriteBatch(msgs, 0)
		if err != nil {
			e.mu.Lock()
			e.sendErrs++
			e.lastError = err
			e.mu.Unlock()
			n = max(n, 1) // skip the datagram that failed
		}
		msgs = msgs[n:]
	}
	clear(e.pending)
	e.pending = e.pending[:0]
}

// SendErrors returns how many sends failed, and the last error.
func (e *Env) SendErrors() (uint64, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.sendErrs, e.lastError
}

// Close stops every loop, closes every socket and waits for the runtime's
// goroutines. Callbacks in progress finish; queued ones are dropped.
func (r *Runtime) Close() {
	r.mu.Lock()
	r.closed = true
	loops, conns := r.loops, r.conns
	r.mu.Unlock()
	r.cancel() // calls in progress end
	for _, l := range loops {
		l.stop()
	}
	for _, c := range conns {
		c.Close()
	}
	r.timers.close()
	r.wg.Wait()
}

// OmitUDPChecksum implements emulator.ChecksumOmitter with the socket
// option SO_NO_CHECK, under which Linux sends the socket's IPv4 datagrams
// with UDP checksum 0. Should the option fail, datagrams keep their
// checksums, which is correct, only slower; the error is kept for
// SendErrors.
func (e *Env) OmitUDPChecksum() {
	raw, err := e.conn.SyscallConn()
	if err == nil {
		cerr := raw.Control(func(fd uintptr) {
			err = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_NO_CHECK, 1)
		})
		if cerr != nil {
			err = cerr
		}
	}
	if err != nil {
		e.mu.Lock()
		e.lastError = fmt.Errorf("SO_NO_CHECK: %w", err)
		e.mu.Unlock()
	}
}

var (
	_ emulator.Poster          = (*Env)(nil)
	_ emulator.ChecksumOmitter = (*Env)(nil)
	_ emulator.GatherSender    = (*Env)(nil)
	_ emulator.Caller          = (*Env)(nil)
	_ emulator.Caller          = (*Loop)(nil)
)
