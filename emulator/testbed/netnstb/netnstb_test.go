//go:build linux && !nonetns

package netnstb

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"golang.org/x/sys/unix"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/internal/testplane"
	"github.com/tracebed/tracebed/emulator/netns"
	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/emulator/switch/switchcmd"
	"github.com/tracebed/tracebed/emulator/testbed"
	"github.com/tracebed/tracebed/topologies"
)

// plane is the data plane of every testbed of these tests.
var plane = testplane.Program()

// prefix starts the run ids of this test binary (see netns.TestRunID).
var prefix = "t" + netns.NewRunID()[:2]

// TestMain lets this binary act as the Go switch processes the testbeds
// start, and checks after the suite that nothing of its runs is left.
func TestMain(m *testing.M) {
	switchcmd.Main(testplane.Registry)
	os.Exit(netns.RunTests(m, prefix))
}

func needRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: the netns testbed needs root (network namespaces); CI runs as root")
	}
}

// leafSpine has two spines, two leaves and a host on each leaf; the link
// of h1 loses 10% of the frames in each direction (applied by leaf1).
const leafSpine = `name: ls
topology:
  defaults:
    link: {rate: 100Mbps, delay: 500us, buffer: 256KiB}
    switch: {queues: 2}
  nodes:
    spine1: {kind: switch}
    spine2: {kind: switch}
    leaf1: {kind: switch}
    leaf2: {kind: switch}
    h1: {kind: host}
    h2: {kind: host}
  links:
    - {endpoints: [h1, leaf1], loss: 0.1}
    - {endpoints: [h2, leaf2]}
    - {endpoints: [leaf1, spine1]}
    - {endpoints: [leaf1, spine2]}
    - {endpoints: [leaf2, spine1]}
    - {endpoints: [leaf2, spine2]}
`

// echo answers every datagram with the same payload.
type echo struct {
	env  emulator.Env
	seen int
}

func (e *echo) Start(env emulator.Env) { e.env = env }
func (e *echo) Recv(from emulator.Addr, p []byte) {
	e.seen++
	e.env.Send(from, p)
}

// pinger sends n numbered datagrams of size bytes, one every gap, and
// counts the distinct answers.
type pinger struct {
	to      emulator.Addr
	n, size int
	gap     time.Duration
	env     emulator.Env
	sent    int
	got     map[uint32]bool
	bad     int
	lastAt  time.Duration
	sentAt  []time.Duration
	minRTT  time.Duration
}

func (p *pinger) Start(env emulator.Env) {
	p.env, p.got = env, map[uint32]bool{}
	p.tick()
}

func (p *pinger) tick() {
	if p.sent == p.n {
		return
	}
	b := make([]byte, p.size)
	binary.BigEndian.PutUint32(b, uint32(p.sent))
	for i := 4; i < len(b); i++ {
		b[i] = byte(p.sent + i)
	}
	p.env.Send(p.to, b)
	p.sentAt = append(p.sentAt, p.env.Now())
	p.sent++
	p.lastAt = p.env.Now()
	p.env.After(p.gap, p.tick)
}

func (p *pinger) Recv(_ emulator.Addr, b []byte) {
	if len(b) != p.size {
		p.bad++
		return
	}
	seq := binary.BigEndian.Uint32(b)
	for i := 4; i < len(b); i++ {
		if b[i] != byte(int(seq)+i) {
			p.bad++
			return
		}
	}
	p.got[seq] = true
	if int(seq) < len(p.sentAt) {
		if rtt := p.env.Now() - p.sentAt[seq]; p.minRTT == 0 || rtt < p.minRTT {
			p.minRTT = rtt
		}
	}
}

func counter(t *testing.T, c p4rt.Client, name string, index int64) uint64 {
	t.Helper()
	n, err := p4rt.NewNames(c.P4Info())
	if err != nil {
		t.Fatal(err)
	}
	q, err := n.CounterQuery(name, index)
	if err != nil {
		t.Fatal(err)
	}
	es, err := c.Read(context.Background(), q)
	if err != nil || len(es) != 1 {
		t.Fatalf("read %s[%d]: %d entities, %v", name, index, len(es), err)
	}
	return uint64(es[0].GetCounterEntry().GetData().GetPacketCount())
}

// TestEchoAcrossLeafSpine: an echo pair across a leaf-spine of Go switch
// processes running the test data plane; jumbo datagrams (one frame each, as far-memory
// pages) cross it intact; every frame the switch's injected loss took is
// counted, and the counters read over P4Runtime account for every missing
// answer; nothing is left afterwards.
func TestEchoAcrossLeafSpine(t *testing.T) {
	needRoot(t)
	top, err := topologies.Parse("ls.yaml", []byte(leafSpine))
	if err != nil {
		t.Fatal(err)
	}
	id := netns.TestRunID(prefix)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tb, err := New(ctx, testbed.Config{Topology: top, Program: &plane, Seed: 7}, Options{RunID: id})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	if tb.Substrate() != "netns" || tb.Topology() != top {
		t.Errorf("substrate %q", tb.Substrate())
	}
	srv := &echo{}
	srvEnv, err := tb.Attach("h2", 7, srv)
	if err != nil {
		t.Fatal(err)
	}
	const n = 300
	cli := &pinger{to: srvEnv.Local(), n: n, size: 4162 - 42, gap: time.Millisecond, sentAt: make([]time.Duration, 0, n)}
	cliEnv, err := tb.Attach("h1", 4000, cli)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Attach("h1", 4000, &echo{}); err == nil {
		t.Error("a second agent on h1:4000 was attached")
	}
	if _, err := tb.Attach("leaf1", 1, &echo{}); err == nil {
		t.Error("an agent was attached to a switch")
	}
	done := func() bool {
		var fin bool
		tb.Inspect(cliEnv, func() { fin = cli.sent == n && tb.Now() > cli.lastAt+300*time.Millisecond })
		return fin
	}
	if err := tb.Run(ctx, 20*time.Millisecond, 20*time.Second, done); err != nil {
		t.Fatal(err)
	}
	var got, bad, seen int
	var rtt time.Duration
	tb.Inspect(cliEnv, func() { got, bad, rtt = len(cli.got), cli.bad, cli.minRTT })
	// Four links each way, 500µs each, applied by the switches; plus
	// serialization (4162 B at 100 Mbit/s: 0.33 ms per hop) and software.
	if rtt < 4*time.Millisecond || rtt > 30*time.Millisecond {
		t.Errorf("shortest round trip %v, want 4 ms of link delay and a few ms more", rtt)
	}
	t.Logf("%d of %d answered, shortest round trip %v", got, n, rtt)
	tb.Inspect(srvEnv, func() { seen = srv.seen })
	// Each direction crosses the lossy link once: about 81% answered.
	if bad != 0 || got < n/2 || got >= n || seen < got {
		t.Fatalf("%d of %d answered (%d corrupt), server saw %d", got, n, bad, seen)
	}
	leaf1, err := tb.Switch("leaf1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Switch("h1"); err == nil {
		t.Error("Switch(h1) answered")
	}
	// leaf1's port 1 faces h1: its injected loss took every missing
	// request on ingress and every missing reply on egress.
	if lost := counter(t, leaf1, "tracebed.port_lost", 1); lost != uint64(n-got) {
		t.Errorf("leaf1 port 1 lost %d frames, want %d (= %d sent - %d answered)", lost, n-got, n, got)
	}
	if drops := counter(t, leaf1, "tracebed.port_queue_drops", 1); drops != 0 {
		t.Errorf("%d queue drops", drops)
	}
	// Both directions crossed the spines (ECMP may pick either).
	var spine uint64
	for _, s := range []string{"spine1", "spine2"} {
		c, err := tb.Switch(s)
		if err != nil {
			t.Fatal(err)
		}
		spine += counter(t, c, "tracebed.port_rx", 1) + counter(t, c, "tracebed.port_rx", 2)
		// The program was loaded over P4Runtime and serves its routes.
		es, err := c.Read(ctx, &p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: &p4v1.TableEntry{}}})
		if want := len(top.Routes()[s]); err != nil || len(es) != want {
			t.Errorf("%s: %d routes read, want %d: %v", s, len(es), want, err)
		}
	}
	// Every request that reached h2 crossed a spine, and so did its
	// reply (leaf1 may lose it after).
	if spine != uint64(2*seen) {
		t.Errorf("the spines received %d frames, want %d requests + %d replies", spine, seen, seen)
	}
	if err := tb.Close(); err != nil {
		t.Fatal(err)
	}
	if err := netns.CheckClean(id); err != nil {
		t.Fatal(err)
	}
	// After Close the agents' state may be read directly, and Inspect
	// runs at once.
	ran := false
	tb.Inspect(cliEnv, func() { ran = true })
	if !ran {
		t.Error("Inspect after Close did not run")
	}
}

// TestCancelledRun: a run whose context ends midway (Ctrl-C) fails with
// the context's error and leaves nothing behind, without Close being
// called; so does a testbed whose switches cannot start.
func TestCancelledRun(t *testing.T) {
	needRoot(t)
	top, err := topologies.Generate(topologies.Params{Generate: "star", Hosts: 2, Rate: 100e6})
	if err != nil {
		t.Fatal(err)
	}
	star, err := top.Build("star")
	if err != nil {
		t.Fatal(err)
	}
	id := netns.TestRunID(prefix)
	ctx, cancel := context.WithCancel(context.Background())
	tb, err := New(ctx, testbed.Config{Topology: star, Program: &plane}, Options{RunID: id})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	srv := &echo{}
	env, err := tb.Attach("h2", 7, srv)
	if err != nil {
		t.Fatal(err)
	}
	cli := &pinger{to: env.Local(), n: 1 << 30, size: 100, gap: time.Millisecond}
	if _, err := tb.Attach("h1", 7, cli); err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(300*time.Millisecond, cancel)
	err = tb.Run(ctx, 10*time.Millisecond, time.Minute, func() bool { return false })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v, want context.Canceled", err)
	}
	// The testbed tears itself down when its context ends.
	deadline := time.Now().Add(10 * time.Second)
	for netns.CheckClean(id) != nil && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if err := netns.CheckClean(id); err != nil {
		t.Fatal(err)
	}
	var seen int
	tb.Inspect(env, func() { seen = srv.seen })
	if seen == 0 {
		t.Error("no datagram crossed the star before the cancel")
	}
	if err := tb.Run(context.Background(), time.Millisecond, time.Minute, func() bool { return false }); err == nil {
		t.Error("Run on a closed testbed succeeded")
	}

	// A switch that cannot start: the error says why, nothing is left.
	id2 := netns.TestRunID(prefix)
	_, err = New(context.Background(), testbed.Config{Topology: star, Program: &plane}, Options{RunID: id2, Executable: "/bin/false"})
	if err == nil || !strings.Contains(err.Error(), "exited during start-up") {
		t.Errorf("New with a broken switch: %v", err)
	}
	if err := netns.CheckClean(id2); err != nil {
		t.Fatal(err)
	}
}

// TestLimit: Run fails with ErrLimit when the time limit passes first.
func TestLimit(t *testing.T) {
	needRoot(t)
	star, err := topologies.Open("star")
	if err != nil {
		t.Fatal(err)
	}
	tb, err := New(context.Background(), testbed.Config{Topology: star, Program: &plane}, Options{RunID: netns.TestRunID(prefix)})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	err = tb.Run(context.Background(), 10*time.Millisecond, 100*time.Millisecond, func() bool { return false })
	if !errors.Is(err, testbed.ErrLimit) || tb.Now() < 100*time.Millisecond {
		t.Errorf("Run: %v at %v", err, tb.Now())
	}
}

func TestOptions(t *testing.T) {
	star, err := topologies.Open("star")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(context.Background(), testbed.Config{Topology: star, Program: &plane}, Options{Switch: "tofino"}); err == nil {
		t.Error("switch tofino accepted")
	}
	if os.Geteuid() != 0 {
		_, err := New(context.Background(), testbed.Config{Topology: star, Program: &plane}, Options{})
		if err == nil || !strings.Contains(err.Error(), "needs root") {
			t.Errorf("New as a user: %v", err)
		}
		return
	}
	if _, err := New(context.Background(), testbed.Config{Topology: star}, Options{}); err == nil || !strings.Contains(err.Error(), "Config.Program") {
		t.Errorf("no program: %v", err)
	}
	nosuch := testplane.Program()
	nosuch.Name = "nosuch"
	if _, err := New(context.Background(), testbed.Config{Topology: star, Program: &nosuch}, Options{RunIDPrefix: prefix}); err == nil || !strings.Contains(err.Error(), "nosuch") {
		t.Errorf("program nosuch: %v", err)
	}
	id := netns.TestRunID(prefix)
	if _, err := New(context.Background(), testbed.Config{Topology: star, Program: &plane}, Options{RunID: id, MTU: 100}); err == nil || !strings.Contains(err.Error(), "MTU 100") {
		t.Errorf("MTU 100: %v", err)
	}
	if err := netns.CheckClean(id); err != nil {
		t.Error(err)
	}
}

// TestL2Hosts: with the host addressing bmv2 needs (every host's MAC on
// every host), the Go switches forward too, and the links carry the
// jumbo MTU.
func TestL2Hosts(t *testing.T) {
	needRoot(t)
	top, err := topologies.Parse("ls.yaml", []byte(leafSpine))
	if err != nil {
		t.Fatal(err)
	}
	tb, err := New(context.Background(), testbed.Config{Topology: top, Program: &plane}, Options{RunIDPrefix: prefix, L2Hosts: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	if !strings.HasPrefix(tb.Network().RunID, prefix) {
		t.Errorf("run id %s lacks the prefix %s", tb.Network().RunID, prefix)
	}
	var mtu int
	tb.Network().Do("h1", func() error {
		ifi, err := net.InterfaceByName("eth0")
		if err == nil {
			mtu = ifi.MTU
		}
		return err
	})
	if mtu != DefaultMTU {
		t.Errorf("h1 eth0 MTU %d, want %d", mtu, DefaultMTU)
	}
	srv, err := tb.Attach("h1", 7, &echo{})
	if err != nil {
		t.Fatal(err)
	}
	cli := &pinger{to: srv.Local(), n: 50, size: 8000, gap: time.Millisecond}
	env, err := tb.Attach("h2", 7, cli)
	if err != nil {
		t.Fatal(err)
	}
	// h1's link loses 10% each way: most are answered, none corrupt.
	done := func() bool {
		var fin bool
		tb.Inspect(env, func() { fin = cli.sent == cli.n && tb.Now() > cli.lastAt+200*time.Millisecond })
		return fin
	}
	if err := tb.Run(context.Background(), 10*time.Millisecond, 10*time.Second, done); err != nil {
		t.Fatal(err)
	}
	tb.Inspect(env, func() {
		if len(cli.got) < cli.n/2 || cli.bad != 0 {
			t.Errorf("%d of %d answered, %d corrupt", len(cli.got), cli.n, cli.bad)
		}
	})
}

// TestSwitchDies: Run fails, naming the switch and showing its log, when
// a switch process dies during a run.
func TestSwitchDies(t *testing.T) {
	needRoot(t)
	star, err := topologies.Open("star")
	if err != nil {
		t.Fatal(err)
	}
	tb, err := New(context.Background(), testbed.Config{Topology: star, Program: &plane}, Options{RunIDPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	time.AfterFunc(200*time.Millisecond, func() { tb.switches.Procs[0].Cmd.Process.Kill() })
	err = tb.Run(context.Background(), 10*time.Millisecond, 10*time.Second, func() bool { return false })
	if err == nil || !strings.Contains(err.Error(), "switch tor exited") || !strings.Contains(err.Error(), "switch running") {
		t.Errorf("Run after the switch died: %v", err)
	}
}

// TestSetBuffers: agents' sockets get SocketBuffer bytes of buffer, past
// net.core.rmem_max (root).
func TestSetBuffers(t *testing.T) {
	needRoot(t)
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := setSocket(c); err != nil {
		t.Fatal(err)
	}
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	raw.Control(func(fd uintptr) {
		for _, opt := range []int{unix.SO_RCVBUF, unix.SO_SNDBUF} {
			// The kernel reports twice the size set (bookkeeping).
			if v, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, opt); err != nil || v < SocketBuffer {
				t.Errorf("option %d: %d B, %v; want %d", opt, v, err, SocketBuffer)
			}
		}
	})
}

// TestRealtimeTakesTurns: a second Realtime waits until the first is
// restored (the lock is per open file, so two callers in one process
// exclude each other as two processes do).
func TestRealtimeTakesTurns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: SCHED_RR needs root (CI runs as root)")
	}
	first, err := Realtime(10)
	if err != nil {
		t.Skipf("skipping: no real-time scheduling here: %v", err)
	}
	got := make(chan func() error, 1)
	go func() {
		second, err := Realtime(10)
		if err != nil {
			t.Error(err)
			second = func() error { return nil }
		}
		got <- second
	}()
	select {
	case second := <-got:
		second()
		first()
		t.Fatal("a second Realtime ran while the first held the lock")
	case <-time.After(300 * time.Millisecond):
	}
	if err := first(); err != nil {
		t.Error(err)
	}
	select {
	case second := <-got:
		if err := second(); err != nil {
			t.Error(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the second Realtime still waits after the first was restored")
	}
}
