package live

import (
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tracebed/tracebed/emulator"
)

func listen(t *testing.T) *net.UDPConn {
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
