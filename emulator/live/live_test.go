//go:build linux && !nonetns

package live

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tracebed/tracebed/emulator"
)

func listen(t testing.TB) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// pinger sends n pings, one per pong, and records round trips.
type pinger struct {
	env   emulator.Env
	peer  emulator.Addr
	n     int
	rtts  []time.Duration
	sent  time.Duration
	done  chan struct{}
	inCB  atomic.Int32
	overl atomic.Bool
}

func (p *pinger) enter() func() {
	if p.inCB.Add(1) != 1 {
		p.overl.Store(true)
	}
	return func() { p.inCB.Add(-1) }
}

func (p *pinger) Start(env emulator.Env) {
	defer p.enter()()
	p.env = env
	p.ping()
}

func (p *pinger) ping() {
	p.sent = p.env.Now()
	p.env.Send(p.peer, []byte("ping"))
}

func (p *pinger) Recv(from emulator.Addr, b []byte) {
	defer p.enter()()
	if string(b) != "pong" || from != p.peer {
		return
	}
	p.rtts = append(p.rtts, p.env.Now()-p.sent)
	if len(p.rtts) == p.n {
		close(p.done)
		return
	}
	// Alternate immediate pings with timer-driven ones.
	if len(p.rtts)%2 == 0 {
		p.ping()
	} else {
		p.env.After(100*time.Microsecond, p.ping)
	}
}

func TestPingPong(t *testing.T) {
	rt := New(1)
	defer rt.Close()
	a, b := listen(t), listen(t)
	var echoEnv emulator.Env // set by Start, used by Recv: both on the echo's loop
	echo := emulator.AgentFunc{
		OnStart: func(env emulator.Env) { echoEnv = env },
		OnRecv: func(from emulator.Addr, p []byte) {
			if string(p) == "ping" {
				echoEnv.Send(from, []byte("pong"))
			}
		},
	}
	if _, err := rt.Attach(b, echo); err != nil {
		t.Fatal(err)
	}
	p := &pinger{peer: netip.MustParseAddrPort(b.LocalAddr().String()), n: 200, done: make(chan struct{})}
	if _, err := rt.Attach(a, p); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("only %d of %d round trips", len(p.rtts), p.n)
	}
	if p.overl.Load() {
		t.Error("two callbacks of one agent ran at once")
	}
	for _, r := range p.rtts {
		if r <= 0 {
			t.Fatalf("non-positive round trip %v", r)
		}
	}
}

func TestTimerStop(t *testing.T) {
	rt := New(1)
	defer rt.Close()
	l, err := rt.NewLoop()
	if err != nil {
		t.Fatal(err)
	}
	fired := make(chan string, 4)
	done := make(chan bool)
	l.Post(func() {
		a := l.After(20*time.Millisecond, func() { fired <- "a" })
		l.After(40*time.Millisecond, func() { fired <- "b" })
		done <- a.Stop() && !a.Stop()
	})
	if !<-done {
		t.Fatal("Stop did not report the pending timer once")
	}
	if got := <-fired; got != "b" {
		t.Fatalf("stopped timer fired: %s", got)
	}
}

func TestCloseStopsEverything(t *testing.T) {
	rt := New(1)
	c := listen(t)
	var recv atomic.Int64
	if _, err := rt.Attach(c, emulator.AgentFunc{OnRecv: func(emulator.Addr, []byte) { recv.Add(1) }}); err != nil {
		t.Fatal(err)
	}
	l, _ := rt.NewLoop()
	rt.Close()
	if l.Post(func() {}) {
		t.Error("Post succeeded after Close")
	}
	if _, err := rt.NewLoop(); err == nil {
		t.Error("NewLoop succeeded after Close")
	}
}

func TestRandIsSeededPerAgent(t *testing.T) {
	draw := func(seed uint64) uint64 {
		rt := New(seed)
		defer rt.Close()
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 0})
		if err != nil {
			t.Fatal(err)
		}
		e, err := rt.Attach(c, emulator.AgentFunc{})
		if err != nil {
			t.Fatal(err)
		}
		_ = e.Local()
		return e.Rand().Uint64()
	}
	if draw(1) == draw(2) {
		t.Error("different seeds, same stream")
	}
}

// TestTimersFireInOrderNeverEarly sets timers out of order, stops some, and
// checks that the others run in deadline order, none before its time.
func TestTimersFireInOrderNeverEarly(t *testing.T) {
	rt := New(1)
	defer rt.Close()
	l, err := rt.NewLoop()
	if err != nil {
		t.Fatal(err)
	}
	type shot struct {
		want time.Duration // deadline, runtime clock
		got  time.Duration
	}
	delays := []time.Duration{900, 100, 500, 300, 700, 200, 800, 400, 600, 1000}
	var fired []shot
	done := make(chan struct{})
	l.Post(func() {
		for i, d := range delays {
			d *= 10 * time.Microsecond
			want := l.Now() + d
			tm := l.After(d, func() {
				fired = append(fired, shot{want, l.Now()})
				if len(fired) == len(delays)/2 {
					close(done)
				}
			})
			if i%2 == 1 {
				tm.Stop()
			}
		}
	})
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("timers did not fire")
	}
	time.Sleep(100 * time.Millisecond) // any stopped timer would have fired by now
	checked := make(chan struct{})
	l.Post(func() {
		defer close(checked)
		if len(fired) != len(delays)/2 {
			t.Errorf("%d timers fired, want %d (the others were stopped)", len(fired), len(delays)/2)
		}
		for i, s := range fired {
			if s.got < s.want {
				t.Errorf("timer %d ran %v early", i, s.want-s.got)
			}
			if i > 0 && s.want < fired[i-1].want {
				t.Errorf("timer due at %v ran after one due at %v", s.want, fired[i-1].want)
			}
		}
	})
	<-checked
}

// TestCallDoesNotBlock: a call that blocks — a slow switch — runs off
// the loop: the loop's timers keep firing on time while it lasts, the
// completions come back on the loop, one callback at a time, in the order
// the calls were made, and each call has a deadline of at most
// emulator.CallTimeout.
func TestCallDoesNotBlock(t *testing.T) {
	rt := New(1)
	defer rt.Close()
	l, err := rt.NewLoop()
	if err != nil {
		t.Fatal(err)
	}
	const slow, tick = 300 * time.Millisecond, 2 * time.Millisecond
	var (
		inCB     atomic.Int32
		overlap  atomic.Bool
		calling  bool
		ticks    int // while the slow call runs
		lateness time.Duration
		order    []string
	)
	enter := func() func() {
		if inCB.Add(1) != 1 {
			overlap.Store(true)
		}
		return func() { inCB.Add(-1) }
	}
	finished := make(chan struct{})
	var next func()
	next = func() {
		due := l.Now() + tick
		l.After(tick, func() {
			defer enter()()
			lateness = max(lateness, l.Now()-due)
			if calling {
				ticks++
			}
			if len(order) < 2 {
				next()
			}
		})
	}
	deadline := func(ctx context.Context) {
		d, ok := ctx.Deadline()
		if !ok || time.Until(d) > emulator.CallTimeout {
			t.Errorf("call context: deadline %v (%v), want within %v", d, ok, emulator.CallTimeout)
		}
	}
	l.Post(func() {
		defer enter()()
		next()
		calling = true
		l.Call(func(ctx context.Context) error {
			deadline(ctx)
			time.Sleep(slow)
			return errors.New("slow")
		}, func(err error) {
			defer enter()()
			calling = false
			order = append(order, "slow: "+err.Error())
		})
		l.Call(func(ctx context.Context) error {
			deadline(ctx)
			return nil
		}, func(err error) {
			defer enter()()
			order = append(order, fmt.Sprintf("fast: %v", err))
			close(finished)
		})
	})
	select {
	case <-finished:
	case <-time.After(20 * time.Second):
		t.Fatal("the calls did not complete")
	}
	checked := make(chan struct{})
	l.Post(func() {
		defer close(checked)
		if want := []string{"slow: slow", "fast: <nil>"}; !slices.Equal(order, want) {
			t.Errorf("completions %q, want %q", order, want)
		}
		// A blocked loop would fire no timer during the call, then one
		// about 300 ms late.
		if ticks < int(slow/tick)/4 || lateness > slow/2 {
			t.Errorf("during a %v call: %d ticks of %v, the latest %v late: the loop was blocked", slow, ticks, tick, lateness)
		}
		t.Logf("during a %v call: %d ticks of %v, the latest %v late", slow, ticks, tick, lateness)
	})
	<-checked
	if overlap.Load() {
		t.Error("two callbacks of one loop ran at once")
	}
}

// TestCloseEndsCalls: Close cancels a call in progress and drops its
// completion, and a call made once the runtime is closed never runs.
func TestCloseEndsCalls(t *testing.T) {
	rt := New(1)
	l, err := rt.NewLoop()
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	var completed atomic.Bool
	l.Post(func() {
		l.Call(func(ctx context.Context) error {
			close(started)
			<-ctx.Done()
			return ctx.Err()
		}, func(error) { completed.Store(true) })
	})
	<-started
	begin := time.Now()
	rt.Close()
	if d := time.Since(begin); d > 5*time.Second {
		t.Errorf("Close took %v with a call in progress", d)
	}
	ran := false
	l.Call(func(context.Context) error { ran = true; return nil }, func(error) { completed.Store(true) })
	time.Sleep(10 * time.Millisecond)
	if completed.Load() || ran {
		t.Errorf("after Close: completion delivered %v, call run %v", completed.Load(), ran)
	}
}

// BenchmarkTimerLateness measures how late a 200 µs timer's function runs on
// its loop, with a socket open (so Go's network poller is in use), for the
// runtime's timers and, for comparison in the same run, for Go's
// time.AfterFunc posting to the loop.
func BenchmarkTimerLateness(b *testing.B) {
	rt := New(1)
	defer rt.Close()
	if _, err := rt.Attach(listen(b), emulator.AgentFunc{}); err != nil {
		b.Fatal(err)
	}
	l, err := rt.NewLoop()
	if err != nil {
		b.Fatal(err)
	}
	const d = 200 * time.Microsecond
	measure := func(set func(func())) []time.Duration {
		var late []time.Duration
		ch := make(chan time.Duration)
		for range b.N {
			start := time.Now()
			set(func() { ch <- time.Since(start) - d })
			late = append(late, <-ch)
		}
		slices.Sort(late)
		return late
	}
	b.ResetTimer()
	ours := measure(func(f func()) { l.Post(func() { l.After(d, f) }) })
	goTimers := measure(func(f func()) { time.AfterFunc(d, func() { l.Post(f) }) })
	q := func(v []time.Duration, f float64) float64 { return float64(v[int(f*float64(len(v)-1))].Microseconds()) }
	b.ReportMetric(q(ours, 0.5), "late-p50-µs")
	b.ReportMetric(q(ours, 0.99), "late-p99-µs")
	b.ReportMetric(q(goTimers, 0.5), "go-timer-late-p50-µs")
	b.ReportMetric(q(goTimers, 0.5)/max(q(ours, 0.5), 1), "go/ours-p50")
}

// TestOmitUDPChecksum: after OmitUDPChecksum an agent's datagrams leave
// with UDP checksum 0 (SO_NO_CHECK); before, with one. A raw socket (root)
// sees the UDP headers as sent.
func TestOmitUDPChecksum(t *testing.T) {
	raw, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_UDP)
	if err != nil {
		t.Skipf("a raw socket needs root: %v", err)
	}
	defer unix.Close(raw)
	tv := unix.NsecToTimeval(int64(5 * time.Second))
	if err := unix.SetsockoptTimeval(raw, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	dst := listen(t)
	defer dst.Close()
	to := netip.MustParseAddrPort(dst.LocalAddr().String())
	rt := New(1)
	defer rt.Close()
	conn := listen(t)
	from := uint16(conn.LocalAddr().(*net.UDPAddr).Port)
	sent := make(chan struct{})
	_, err = rt.Attach(conn, emulator.AgentFunc{OnStart: func(env emulator.Env) {
		env.Send(to, []byte("with checksum")) // leaves when Start returns
		env.After(0, func() {
			env.(emulator.ChecksumOmitter).OmitUDPChecksum()
			env.Send(to, []byte("without"))
			close(sent)
		})
	}})
	if err != nil {
		t.Fatal(err)
	}
	<-sent
	var sums []uint16
	buf := make([]byte, 2048)
	for len(sums) < 2 {
		n, _, err := unix.Recvfrom(raw, buf, 0)
		if err != nil {
			t.Fatalf("raw socket: %v (checksums so far %#04x)", err, sums)
		}
		ihl := int(buf[0]&0x0f) * 4
		if n < ihl+8 || binary.BigEndian.Uint16(buf[ihl:]) != from {
			continue // another datagram on this host
		}
		sums = append(sums, binary.BigEndian.Uint16(buf[ihl+6:]))
	}
	if sums[0] == 0 || sums[1] != 0 {
		t.Fatalf("UDP checksums sent: %#04x, want one then 0", sums)
	}
}

// TestTimerStopAfterClose stops timers after their queue has closed, as a
// loop's last callback does while the runtime shuts down (a QP leaving for
// the error state stops its retransmission timer). The queue had dropped
// its heap but not the timers' places in it, and Stop indexed the empty
// heap: a panic that ended a FreeINA run under the full test suite.
func TestTimerStopAfterClose(t *testing.T) {
	var q timerQueue
	var ps []*pending
	for i := range 3 {
		p, ok := q.add(time.Hour+time.Duration(i), func() {})
		if !ok {
			t.Fatal("add refused on an open queue")
		}
		ps = append(ps, p)
	}
	q.close()
	for _, p := range ps {
		q.remove(p) // must not panic
	}
	if _, ok := q.add(time.Second, func() {}); ok {
		t.Error("add accepted on a closed queue")
	}
}
