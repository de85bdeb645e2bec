//go:build linux && !nonetns

package goswitch

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/dataplane"
	"github.com/tracebed/tracebed/emulator/frame"
	"github.com/tracebed/tracebed/emulator/internal/testplane"
	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/topologies"
)

// registry holds the engine's test data plane alone.
func registry(t testing.TB) *dataplane.Registry {
	t.Helper()
	r, err := testplane.Registry()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func topo(t testing.TB, p topologies.Params) *topologies.Topology {
	t.Helper()
	f, err := topologies.Generate(p)
	if err != nil {
		t.Fatal(err)
	}
	top, err := f.Build("test")
	if err != nil {
		t.Fatal(err)
	}
	return top
}

// wires connects each port of a switch to a socketpair; the test holds the
// far ends (index = port number).
type wires struct{ far []int }

func (w *wires) open(p *topologies.Port) (PortIO, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	for len(w.far) <= p.Num {
		w.far = append(w.far, -1)
	}
	w.far[p.Num] = fds[1]
	unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_SNDBUF, 4<<20)
	unix.SetsockoptInt(fds[1], unix.SOL_SOCKET, unix.SO_SNDBUF, 4<<20)
	return NewSocketIO(fds[0], Batch), nil
}

func (w *wires) close() {
	for _, fd := range w.far {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// send writes a frame into port num from the far side.
func (w *wires) send(t testing.TB, num int, f []byte) {
	t.Helper()
	if _, err := unix.Write(w.far[num], f); err != nil {
		t.Fatal(err)
	}
}

// recv reads one frame that left port num, waiting up to d.
func (w *wires) recv(t testing.TB, num int, d time.Duration) ([]byte, bool) {
	t.Helper()
	fds := []unix.PollFd{{Fd: int32(w.far[num]), Events: unix.POLLIN}}
	deadline := time.Now().Add(d)
	for {
		// Go's preemption signals interrupt poll: retry until the deadline.
		n, err := unix.Poll(fds, int(time.Until(deadline)/time.Millisecond)+1)
		if n > 0 {
			break
		}
		if err != unix.EINTR || time.Now().After(deadline) {
			return nil, false
		}
	}
	buf := make([]byte, 4096)
	k, err := unix.Read(w.far[num], buf)
	if err != nil {
		return nil, false
	}
	return buf[:k], true
}

func start(t testing.TB, top *topologies.Topology, name string) (*Switch, *wires) {
	t.Helper()
	w := &wires{}
	s, err := New(Config{Topology: top, Name: name, Programs: registry(t), Open: w.open, DeviceID: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		w.close()
	})
	return s, w
}

func udp(top *topologies.Topology, from, to string, payload int) []byte {
	a, b := top.Node(from), top.Node(to)
	return frame.AppendUDP(nil, frame.UDP{
		SrcMAC: a.MAC, DstMAC: a.Uplink().MAC,
		Src: netip.AddrPortFrom(a.IP, 1000), Dst: netip.AddrPortFrom(b.IP, 2000),
	}, make([]byte, payload))
}

func TestForwardAndCount(t *testing.T) {
	top := topo(t, topologies.Params{Generate: "star", Hosts: 3})
	s, w := start(t, top, "tor")
	f := udp(top, "h1", "h2", 100)
	w.send(t, 1, f)
	got, ok := w.recv(t, 2, time.Second)
	if !ok {
		t.Fatal("frame not forwarded to port 2")
	}
	h, _, err := frame.ParseUDP(got)
	if err != nil {
		t.Fatal(err)
	}
	if h.DstMAC != top.Node("h2").MAC || h.SrcMAC != top.Node("tor").Ports[1].MAC || h.TTL != frame.DefaultTTL-1 {
		t.Errorf("forwarded header %+v", h)
	}
	// Malformed and oversize frames are dropped and counted.
	w.send(t, 1, []byte{1, 2, 3})
	w.send(t, 3, make([]byte, 100))
	w.send(t, 1, append(udp(top, "h1", "h3", BufSize), 0))
	time.Sleep(50 * time.Millisecond)
	st, err := s.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Ports[1].RxPackets != 3 || st.Ports[1].RxOversize != 1 || st.Ports[2].TxPackets != 1 || st.Ports[3].RxPackets != 1 {
		t.Errorf("port counters %+v", st.Ports)
	}
	var malformed uint64
	s.Do(context.Background(), func() { malformed = s.pipeline.(*testplane.Plane).Drops[testplane.DropMalformed] })
	if malformed != 2 {
		t.Errorf("malformed drops %d, want 2", malformed)
	}
	if _, ok := w.recv(t, 3, 20*time.Millisecond); ok {
		t.Error("a dropped frame came out")
	}
}

// TestPacingAndDelay checks that a burst leaves at the link rate and that
// link delay applies once per direction and switch traversal.
func TestPacingAndDelay(t *testing.T) {
	const (
		rate  = 10 * units.Mbps
		delay = 5 * time.Millisecond
		n     = 20
		size  = 1250 - frame.HeaderLen // 1250-byte frames: 1 ms each
	)
	top := topo(t, topologies.Params{Generate: "star", Hosts: 2, Rate: rate, Delay: units.Duration(delay), Buffer: 64 * units.KiB})
	_, w := start(t, top, "tor")
	t0 := time.Now()
	for range n {
		w.send(t, 1, udp(top, "h1", "h2", size))
	}
	var first, last time.Duration
	for i := range n {
		if _, ok := w.recv(t, 2, 5*time.Second); !ok {
			t.Fatalf("frame %d lost", i)
		}
		el := time.Since(t0)
		if i == 0 {
			first = el
		}
		last = el
	}
	// Ingress (host direction) and egress delay, plus one serialization.
	if min := 2*delay + time.Millisecond; first < min {
		t.Errorf("first frame after %v, want at least %v", first, min)
	}
	// n frames of 1 ms each, delayed twice, cannot all arrive sooner.
	if min := 2*delay + n*time.Millisecond; last < min {
		t.Errorf("%d frames of 1ms arrived after %v, want at least %v: not paced", n, last, min)
	}
	if max := 2 * (2*delay + n*time.Millisecond); last > max+100*time.Millisecond {
		t.Errorf("%d frames of 1ms arrived after %v: the pacer lags", n, last)
	}
	t.Logf("first frame after %v, %d frames spread over %v", first, n, last-first)
}

func TestQueueDrops(t *testing.T) {
	top := topo(t, topologies.Params{Generate: "star", Hosts: 3, Rate: units.Mbps, Buffer: 3000})
	s, w := start(t, top, "tor")
	for range 10 {
		w.send(t, 1, udp(top, "h1", "h2", 1000-frame.HeaderLen))
	}
	time.Sleep(100 * time.Millisecond)
	st, _ := s.Stats(context.Background())
	p := st.Ports[2]
	if p.QueueDrops < 5 || p.QueueDrops+uint64(p.QueueBytes/1000)+p.TxPackets != 10 {
		t.Errorf("queue drops %d, backlog %d, sent %d of 10 frames into a 3000-byte buffer", p.QueueDrops, p.QueueBytes, p.TxPackets)
	}
}

func TestRegistry(t *testing.T) {
	if _, err := dataplane.NewRegistry(testplane.Program(), testplane.Program()); err == nil {
		t.Error("duplicate program accepted")
	}
	bad := testplane.Program()
	bad.Name = "other"
	if _, err := dataplane.NewRegistry(bad); err == nil {
		t.Error("program whose name differs from its P4Info accepted")
	}
	if _, err := dataplane.NewRegistry(); err == nil {
		t.Error("empty registry accepted")
	}
	r := registry(t)
	if p, err := r.Match(testplane.P4Info()); err != nil || p.Name != testplane.Name {
		t.Errorf("Match(testplane) = %v, %v", p, err)
	}
	if r.Default().Name != testplane.Name {
		t.Errorf("default program %s", r.Default().Name)
	}
	info := testplane.P4Info()
	info.Tables[0].Preamble.Id++
	if _, err := r.Match(info); err == nil {
		t.Error("P4Info with a different table id matched")
	}
	info = testplane.P4Info()
	info.PkgInfo.Name = "ina"
	if _, err := r.Match(info); err == nil {
		t.Error("unknown program matched")
	}
	if _, err := New(Config{Topology: topo(t, topologies.Params{Generate: "star", Hosts: 2}), Name: "tor", Programs: r, Program: "nosuch"}); err == nil || !strings.Contains(err.Error(), "nosuch") {
		t.Errorf("unknown initial program: %v", err)
	}
}

// idle returns the switch "tor" of top on socketpair wires, not running
// (a test drives it with receive and service); both are released when t
// ends.
func idle(t testing.TB, top *topologies.Topology) (*Switch, *wires) {
	t.Helper()
	w := &wires{}
	t.Cleanup(w.close)
	s, err := New(Config{Topology: top, Name: "tor", Programs: registry(t), Open: w.open, DeviceID: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.release)
	return s, w
}

// FuzzPacketPath feeds arbitrary frames into a switch port: the switch must
// never panic, and every frame must be either forwarded or counted as a
// drop by the switch or its pipeline.
func FuzzPacketPath(f *testing.F) {
	top := topo(f, topologies.Params{Generate: "star", Hosts: 3})
	f.Add(byte(1), udp(top, "h1", "h2", 10))
	f.Add(byte(2), []byte{0xff})
	f.Add(byte(3), udp(top, "h3", "h3", 0))
	sw := top.Node("tor")
	f.Add(byte(1), frame.AppendUDP(nil, frame.UDP{Src: netip.AddrPortFrom(top.Node("h1").IP, 1), Dst: netip.AddrPortFrom(sw.IP, 1)}, nil))
	f.Fuzz(func(t *testing.T, port byte, data []byte) {
		s, _ := idle(t, top)
		p := s.ports[int(port)%3+1]
		buf := s.getBuf()
		n := copy(buf, data)
		if len(data) > len(buf) {
			n = len(data)
		}
		s.receive(0, p, buf, n)
		s.service(1 << 40)
		fp := s.pipeline.(*testplane.Plane)
		var drops uint64
		for _, d := range fp.Drops {
			drops += d
		}
		st := s.stats()
		if got := fp.Forwarded + drops + p.stats.RxOversize; got != 1 {
			t.Fatalf("frame accounted %d times (forwarded %d, drops %v, oversize %d)", got, fp.Forwarded, fp.Drops, p.stats.RxOversize)
		}
		var tx uint64
		for _, ps := range st.Ports {
			tx += ps.TxPackets + ps.TxErrors + ps.QueueDrops
		}
		if tx != fp.Forwarded {
			t.Fatalf("forwarded %d, sent %d", fp.Forwarded, tx)
		}
	})
}

// TestImpairments: loss on h1's link (applied on ingress from the host),
// duplication on h2's (on egress to it); every frame is accounted for.
func TestImpairments(t *testing.T) {
	top, err := topologies.Parse("impair.yaml", []byte(`
name: impair
topology:
  defaults: {link: {rate: 10Gbps}}
  nodes:
    tor: {kind: switch}
    h1: {kind: host}
    h2: {kind: host}
  links:
    - {endpoints: [h1:eth0, tor:eth1], loss: 30%}
    - {endpoints: [h2:eth0, tor:eth2], duplicate: 20%}
`))
	if err != nil {
		t.Fatal(err)
	}
	s, w := start(t, top, "tor")
	const n = 500
	f := udp(top, "h1", "h2", 64)
	got := 0
	for range n / 50 {
		for range 50 {
			w.send(t, 1, f)
		}
		for {
			if _, ok := w.recv(t, 2, 30*time.Millisecond); !ok {
				break
			}
			got++
		}
	}
	st, err := s.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	lost, dup := st.Ports[1].Lost, st.Ports[2].Duplicated
	if want := n - int(lost) + int(dup); got != want {
		t.Errorf("received %d frames; %d sent − %d lost + %d duplicated = %d", got, n, lost, dup, want)
	}
	if lost < n*20/100 || lost > n*40/100 {
		t.Errorf("lost %d of %d at 30%%", lost, n)
	}
	if d := float64(dup) / float64(n-int(lost)); d < 0.1 || d > 0.3 {
		t.Errorf("duplicated %d of %d at 20%%", dup, n-int(lost))
	}
}

// TestStrictPriority: a frame of a higher class (DSCP CS7) queued behind
// lower-class ones leaves as soon as the link is free.
func TestStrictPriority(t *testing.T) {
	top := topo(t, topologies.Params{Generate: "star", Hosts: 2, Rate: 10 * units.Mbps})
	_, w := start(t, top, "tor")
	a, b := top.Node("h1"), top.Node("h2")
	mk := func(tos uint8, port uint16) []byte {
		return frame.AppendUDP(nil, frame.UDP{SrcMAC: a.MAC, DstMAC: a.Uplink().MAC, TOS: tos,
			Src: netip.AddrPortFrom(a.IP, port), Dst: netip.AddrPortFrom(b.IP, 2000)}, make([]byte, 1200))
	}
	for i := range 5 {
		w.send(t, 1, mk(0, uint16(100+i)))
	}
	w.send(t, 1, mk(7<<5, 999))
	var order []uint16
	for range 6 {
		f, ok := w.recv(t, 2, 5*time.Second)
		if !ok {
			t.Fatal("frame lost")
		}
		h, _, err := frame.ParseUDP(f)
		if err != nil {
			t.Fatal(err)
		}
		order = append(order, h.Src.Port())
	}
	// The first low-priority frame may already be on the wire; the CS7
	// frame must come right after it at the latest.
	if order[0] != 999 && order[1] != 999 {
		t.Errorf("departure order %v: the CS7 frame (999) waited behind lower classes", order)
	}
}

// splitIO is a port that receives nothing and sends through a socket of
// its own (as an AF_XDP port sends through AF_PACKET): FD is a pipe's read
// end, never writable, and the first refuse calls of Send find the socket
// full.
type splitIO struct {
	rx, rxw int
	tx      PortIO
	refuse  int
}

func (s *splitIO) Recv([][]byte, []int) (int, error) { return 0, nil }
func (s *splitIO) FD() int                           { return s.rx }
func (s *splitIO) SendFD() int                       { return s.tx.FD() }
func (s *splitIO) Close() error {
	unix.Close(s.rx)
	unix.Close(s.rxw)
	return s.tx.Close()
}
func (s *splitIO) Send(frames [][]byte) (int, error) {
	if s.refuse > 0 {
		s.refuse--
		return 0, nil
	}
	return s.tx.Send(frames)
}

// TestBlockedSendSocket: a port whose send socket was full is retried when
// that socket, not the port's receive descriptor, becomes writable.
func TestBlockedSendSocket(t *testing.T) {
	top := topo(t, topologies.Params{Generate: "star", Hosts: 2})
	w := &wires{}
	open := func(p *topologies.Port) (PortIO, error) {
		io, err := w.open(p)
		if err != nil || p.Num != 2 {
			return io, err
		}
		var pipe [2]int
		if err := unix.Pipe2(pipe[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
			return nil, err
		}
		return &splitIO{rx: pipe[0], rxw: pipe[1], tx: io, refuse: 1}, nil
	}
	s, err := New(Config{Topology: top, Name: "tor", Programs: registry(t), Open: open, DeviceID: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		w.close()
	}()
	w.send(t, 1, udp(top, "h1", "h2", 100))
	if _, ok := w.recv(t, 2, 5*time.Second); !ok {
		t.Fatal("the frame refused by the full send socket was never sent: the switch did not poll the send socket")
	}
}

// TestNewFrame: the frames a pipeline builds with emulator.NewFrame come
// from the switch's buffer pool and go back to it once sent, so that an
// INA result multicast to its workers allocates nothing per copy.
func TestNewFrame(t *testing.T) {
	top := topo(t, topologies.Params{Generate: "star", Hosts: 2})
	s, w := idle(t, top)
	var pool emulator.FramePool = s // the switch is the pipeline's Emitter
	f := emulator.NewFrame(s, 100)
	if len(f) != 0 || cap(f) != s.cfg.MaxFrame {
		t.Fatalf("NewFrame(100): len %d cap %d, want 0 and the pool's %d", len(f), cap(f), s.cfg.MaxFrame)
	}
	if big := pool.NewFrame(s.cfg.MaxFrame + 1); cap(big) < s.cfg.MaxFrame+1 {
		t.Fatalf("NewFrame(MaxFrame+1): cap %d", cap(big))
	}
	f = append(f, udp(top, "h1", "h2", 10)...)
	pooled := len(s.pool)
	s.nowNs = 0
	s.Emit(2, 0, f)
	s.service(1 << 40)
	if got, ok := w.recv(t, 2, time.Second); !ok || len(got) != len(f) {
		t.Fatalf("the frame did not leave port 2 (%d bytes, %v)", len(got), ok)
	}
	if len(s.pool) != pooled+1 || &s.pool[len(s.pool)-1][0] != &f[:1][0] {
		t.Errorf("the sent frame did not go back to the pool (%d buffers, was %d)", len(s.pool), pooled)
	}
	if allocs := testing.AllocsPerRun(100, func() {
		g := append(s.NewFrame(len(f)), f...)
		s.Emit(2, 0, g)
		s.service(1 << 40)
	}); allocs != 0 {
		t.Errorf("a generated frame sent costs %.1f allocations, want 0", allocs)
	}
}
