package sim

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/frame"
	"github.com/tracebed/tracebed/emulator/internal/testplane"
	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/topologies"
)

func mustTopo(t testing.TB, yaml string) *topologies.Topology {
	t.Helper()
	top, err := topologies.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return top
}

// mustNet builds top on a fresh simulation; switches run the test data
// plane unless opts says otherwise.
func mustNet(t testing.TB, top *topologies.Topology, opts Options) (*Sim, *Network) {
	t.Helper()
	if opts.Pipeline == nil {
		opts.Pipeline = testplane.SimPipeline
	}
	s := New()
	n, err := NewNetwork(s, top, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s, n
}

// sink records when and what arrives.
type sink struct {
	env   emulator.Env
	times []time.Duration
	seqs  []uint64
	bytes int
}

func (k *sink) Start(env emulator.Env) { k.env = env }
func (k *sink) Recv(_ emulator.Addr, b []byte) {
	k.times = append(k.times, k.env.Now())
	if len(b) >= 8 {
		k.seqs = append(k.seqs, binary.BigEndian.Uint64(b))
	}
	k.bytes += len(b) + frame.HeaderLen
}

// burst sends n frames of payload bytes at Start, numbered from 0.
type burst struct {
	to      emulator.Addr
	n, size int
}

func (b burst) Start(env emulator.Env) {
	buf := make([]byte, b.size)
	for i := range b.n {
		if len(buf) >= 8 {
			binary.BigEndian.PutUint64(buf, uint64(i))
		}
		env.Send(b.to, buf)
	}
}
func (burst) Recv(emulator.Addr, []byte) {}

const chain = `name: chain
topology:
  defaults:
    switch: {latency: 300ns}
  nodes:
    s1: {kind: switch}
    s2: {kind: switch}
    h1: {kind: host}
    h2: {kind: host}
  links:
    - {endpoints: [h1, s1], rate: 10Gbps, delay: 1us}
    - {endpoints: [s1, s2], rate: 40Gbps, delay: 5us}
    - {endpoints: [s2, h2], rate: 25Gbps, delay: 2us}
`

// TestOnePacketLatency: a lone frame's latency is the sum over hops of
// size/rate + delay, plus each switch's pipeline latency.
func TestOnePacketLatency(t *testing.T) {
	top := mustTopo(t, chain)
	for _, payload := range []int{0, 100, 1458, 8958} {
		s, n := mustNet(t, top, Options{})
		rx := &sink{}
		dst := netip.AddrPortFrom(top.Node("h2").IP, 7)
		n.Attach("h2", 7, rx)
		n.Attach("h1", 7, burst{to: dst, n: 1, size: payload})
		s.Run()
		size := units.Bytes(payload + frame.HeaderLen)
		var want Time
		for _, l := range top.Links {
			want += Time(units.TransmitTime(size, l.Rate)) + FromDuration(l.Delay)
		}
		want += 2 * 300 * Nanosecond
		// Env.Now has nanosecond resolution: the arrival is want, truncated.
		if len(rx.times) != 1 || rx.times[0] != want.Duration() {
			t.Fatalf("payload %d: arrived at %v, want %v", payload, rx.times, want)
		}
	}
}

// TestSaturatedLink: a backlogged sender delivers exactly rate × time.
func TestSaturatedLink(t *testing.T) {
	top := mustTopo(t, `name: pair
topology:
  nodes: {s: {kind: switch}, a: {kind: host}, b: {kind: host}}
  links:
    - {endpoints: [a, s], rate: 10Gbps, delay: 2us, buffer: 64MiB}
    - {endpoints: [s, b], rate: 10Gbps, delay: 2us, buffer: 64MiB}
`)
	s, n := mustNet(t, top, Options{})
	rx := &sink{}
	n.Attach("b", 1, rx)
	const frames, size = 5000, 1500
	n.Attach("a", 1, burst{to: netip.AddrPortFrom(top.Node("b").IP, 1), n: frames, size: size - frame.HeaderLen})
	window := 2 * Millisecond
	start := 100 * Microsecond
	s.RunUntil(start)
	before := len(rx.times)
	s.RunUntil(start + window)
	got := float64(len(rx.times)-before) * size * 8
	want := float64(10*units.Gbps) * window.Seconds()
	if math.Abs(got-want) > size*8 {
		t.Fatalf("delivered %.0f bits in %v, want %.0f ± one frame", got, window, want)
	}
	s.Run()
	if len(rx.times) != frames {
		t.Fatalf("delivered %d of %d", len(rx.times), frames)
	}
	st, _ := n.Stats("a", 1)
	if st.TxPackets != frames || st.Drops != 0 {
		t.Fatalf("sender NIC %+v", st)
	}
}

// TestDropTail: 3 frames fit a 3×size buffer behind the one on the wire;
// everything beyond is dropped and counted.
func TestDropTail(t *testing.T) {
	for _, tt := range []struct {
		buffer     units.Bytes
		sent, fits int
	}{
		{3000, 10, 1 + 2}, // two full frames fit, one on the wire
		{2999, 10, 1 + 1},
		{1500, 10, 1 + 1},
		{1499, 10, 1},
		{15000, 10, 10},
	} {
		top := mustTopo(t, fmt.Sprintf(`name: dt
topology:
  nodes: {s: {kind: switch}, a: {kind: host}, b: {kind: host}}
  links:
    - {endpoints: [a, s], rate: 100Gbps}
    - {endpoints: [s, b], rate: 1Gbps, buffer: %dB}
`, tt.buffer))
		s, n := mustNet(t, top, Options{})
		rx := &sink{}
		n.Attach("b", 1, rx)
		n.Attach("a", 1, burst{to: netip.AddrPortFrom(top.Node("b").IP, 1), n: tt.sent, size: 1500 - frame.HeaderLen})
		s.Run()
		st, _ := n.Stats("s", 2)
		// The fast ingress delivers frame k at k·T_fast; the slow egress is
		// busy for all of them, so the queue only grows.
		if len(rx.times) != tt.fits || int(st.Drops) != tt.sent-tt.fits {
			t.Errorf("buffer %v: delivered %d, dropped %d; want %d, %d", tt.buffer, len(rx.times), st.Drops, tt.fits, tt.sent-tt.fits)
		}
	}
}

// prioByPort queues frames from UDP port 2 in queue 1, others in queue 0.
func prioByPort(f []byte) int {
	if h, _, err := frame.ParseUDP(f); err == nil && h.Src.Port() == 2 {
		return 1
	}
	return 0
}

// TestStrictPriority: once both are queued, every high-priority frame leaves
// before any queued low-priority frame.
func TestStrictPriority(t *testing.T) {
	top := mustTopo(t, `name: prio
topology:
  nodes: {s: {kind: switch, queues: 2}, lo: {kind: host}, hi: {kind: host}, r: {kind: host}}
  links:
    - {endpoints: [lo, s], rate: 100Gbps}
    - {endpoints: [hi, s], rate: 100Gbps}
    - {endpoints: [s, r], rate: 1Gbps}
`)
	s, n := mustNet(t, top, Options{Pipeline: func(sw *topologies.Node, routes topologies.RouteTable) (emulator.Pipeline, error) {
		p, err := testplane.New(sw, routes)
		if err != nil {
			return nil, err
		}
		p.Prio = prioByPort
		return p, nil
	}})
	var order []uint16
	n.Attach("r", 9, emulator.AgentFunc{OnRecv: func(from emulator.Addr, _ []byte) { order = append(order, from.Port()) }})
	dst := netip.AddrPortFrom(top.Node("r").IP, 9)
	n.Attach("lo", 1, burst{to: dst, n: 20, size: 1000})
	n.Attach("hi", 2, burst{to: dst, n: 20, size: 1000})
	s.Run()
	got := fmt.Sprint(order)
	// The first low-priority frame is already on the wire when the high
	// ones arrive; then all 20 high-priority frames, then the rest.
	want := fmt.Sprint(append(append([]uint16{1}, repeat(2, 20)...), repeat(1, 19)...))
	if got != want {
		t.Fatalf("departure order\n got %s\nwant %s", got, want)
	}
}

func repeat(v uint16, n int) []uint16 {
	out := make([]uint16, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func TestImpairments(t *testing.T) {
	const frames = 20000
	run := func(seed uint64, attrs string) (*sink, PortStats) {
		top := mustTopo(t, `name: imp
topology:
  nodes: {s: {kind: switch}, a: {kind: host}, b: {kind: host}}
  links:
    - {endpoints: [a, s], rate: 100Gbps, delay: 1us`+attrs+`}
    - {endpoints: [s, b], rate: 100Gbps, delay: 1us, buffer: 64MiB}
`)
		s, n := mustNet(t, top, Options{Seed: seed})
		rx := &sink{}
		n.Attach("b", 1, rx)
		n.Attach("a", 1, burst{to: netip.AddrPortFrom(top.Node("b").IP, 1), n: frames, size: 200})
		s.Run()
		st, _ := n.Stats("a", 1)
		return rx, st
	}
	within := func(name string, got uint64, p float64) {
		mean := p * frames
		sd := math.Sqrt(frames * p * (1 - p))
		if math.Abs(float64(got)-mean) > 5*sd {
			t.Errorf("%s: %d events in %d frames, want %.0f ± %.0f", name, got, frames, mean, 5*sd)
		}
	}
	rx, st := run(1, ", loss: 5%")
	within("loss", st.Lost, 0.05)
	if len(rx.seqs) != frames-int(st.Lost) {
		t.Errorf("loss: received %d, want %d", len(rx.seqs), frames-int(st.Lost))
	}
	rx, st = run(1, ", duplicate: 1%")
	within("duplicate", st.Duplicated, 0.01)
	if len(rx.seqs) != frames+int(st.Duplicated) {
		t.Errorf("duplicate: received %d, want %d", len(rx.seqs), frames+int(st.Duplicated))
	}
	rx, st = run(1, ", reorder: 1%")
	within("reorder", st.Reordered, 0.01)
	inversions := 0
	for i := 1; i < len(rx.seqs); i++ {
		if rx.seqs[i] < rx.seqs[i-1] {
			inversions++
		}
	}
	if inversions == 0 || len(rx.seqs) != frames {
		t.Errorf("reorder: %d inversions, %d frames", inversions, len(rx.seqs))
	}
	// Same seed, same outcome; another seed, another outcome.
	a, _ := run(7, ", loss: 1%, duplicate: 1%, reorder: 1%")
	b, _ := run(7, ", loss: 1%, duplicate: 1%, reorder: 1%")
	c, _ := run(8, ", loss: 1%, duplicate: 1%, reorder: 1%")
	if fmt.Sprint(a.seqs, a.times) != fmt.Sprint(b.seqs, b.times) {
		t.Error("same seed, different runs")
	}
	if fmt.Sprint(a.seqs) == fmt.Sprint(c.seqs) {
		t.Error("different seeds, identical impairments")
	}
}

func TestDropsAreCounted(t *testing.T) {
	top := mustTopo(t, chain)
	s, n := mustNet(t, top, Options{})
	n.Attach("h1", 1, burst{to: netip.MustParseAddrPort("10.9.9.9:1"), n: 3, size: 10})     // no route
	n.Attach("h1", 2, burst{to: netip.AddrPortFrom(top.Node("h2").IP, 99), n: 2, size: 10}) // no listener
	s.Run()
	p := n.Switch("s1").Pipeline.(*testplane.Plane)
	if p.Drops[testplane.DropNoRoute] != 3 {
		t.Errorf("no_route drops %d, want 3", p.Drops[testplane.DropNoRoute])
	}
	if hs := n.HostStats("h2"); hs.NoListener != 2 {
		t.Errorf("h2 %+v, want 2 frames without listener", hs)
	}
}

func TestLoopbackAndAttachErrors(t *testing.T) {
	top := mustTopo(t, chain)
	s, n := mustNet(t, top, Options{})
	rx := &sink{}
	n.Attach("h1", 5, rx)
	n.Attach("h1", 6, burst{to: netip.AddrPortFrom(top.Node("h1").IP, 5), n: 2, size: 8})
	s.Run()
	if len(rx.times) != 2 || rx.times[0] != 0 {
		t.Errorf("loopback delivered %v", rx.times)
	}
	if _, err := n.Attach("h1", 5, rx); err == nil || !strings.Contains(err.Error(), "taken") {
		t.Errorf("double bind: %v", err)
	}
	if _, err := n.Attach("s1", 5, rx); err == nil {
		t.Error("attached an agent to a switch")
	}
}

func TestHostBuffer(t *testing.T) {
	top := mustTopo(t, chain)
	s, n := mustNet(t, top, Options{HostBuffer: 3000})
	rx := &sink{}
	n.Attach("h2", 1, rx)
	n.Attach("h1", 1, burst{to: netip.AddrPortFrom(top.Node("h2").IP, 1), n: 10, size: 1500 - frame.HeaderLen})
	s.Run()
	st, _ := n.Stats("h1", 1)
	if len(rx.times) != 3 || st.Drops != 7 {
		t.Errorf("delivered %d, NIC drops %d; want 3 and 7", len(rx.times), st.Drops)
	}
}

// TestNoPipeline: the network knows no data plane of its own, and says so.
func TestNoPipeline(t *testing.T) {
	_, err := NewNetwork(New(), mustTopo(t, chain), Options{})
	if err == nil || !strings.Contains(err.Error(), "Options.Pipeline") {
		t.Errorf("switches without a data plane: %v", err)
	}
}

// omitter sends one datagram without a UDP checksum.
type omitter struct{ to emulator.Addr }

func (o omitter) Start(env emulator.Env) {
	env.(emulator.ChecksumOmitter).OmitUDPChecksum()
	env.Send(o.to, []byte("no checksum, please"))
}
func (omitter) Recv(emulator.Addr, []byte) {}

// TestOmitUDPChecksum: an agent that omits checksums sends frames with
// UDP checksum 0, which hosts deliver; other agents' frames keep theirs.
func TestOmitUDPChecksum(t *testing.T) {
	top := mustTopo(t, chain)
	s, n := mustNet(t, top, Options{})
	var sums []uint16
	if err := n.Tap("h1", 1, func(_ Time, f []byte) {
		sums = append(sums, binary.BigEndian.Uint16(f[frame.HeaderLen-2:]))
	}); err != nil {
		t.Fatal(err)
	}
	rx := &sink{}
	dst := netip.AddrPortFrom(top.Node("h2").IP, 7)
	n.Attach("h2", 7, rx)
	n.Attach("h1", 8, omitter{to: dst})
	n.Attach("h1", 9, burst{to: dst, n: 1, size: 20})
	s.Run()
	if len(sums) != 2 || sums[0] != 0 || sums[1] == 0 {
		t.Fatalf("UDP checksums sent: %#04x, want 0 then one", sums)
	}
	if st := n.HostStats("h2"); st.Delivered != 2 || st.BadChecksum != 0 {
		t.Fatalf("h2 received %+v, want both delivered", st)
	}
}

// TestCall: an agent's control-plane calls (emulator.Caller) run outside
// its callbacks, ControlLatency after they were made, in the order they
// were made; each completion is an event of its own, after the events
// already due at its instant, never inside Call.
func TestCall(t *testing.T) {
	for _, lat := range []time.Duration{0, 50 * time.Microsecond} {
		top := mustTopo(t, chain)
		s, n := mustNet(t, top, Options{ControlLatency: lat})
		var log []string
		var env emulator.Env
		inCallback := false
		at := func(what string) {
			log = append(log, fmt.Sprintf("%s@%v", what, env.Now()))
		}
		call := func(name string) {
			env.(emulator.Caller).Call(func(ctx context.Context) error {
				if inCallback {
					t.Errorf("%v: op %s ran inside a callback", lat, name)
				}
				if _, ok := ctx.Deadline(); ok {
					t.Errorf("%v: op %s has a wall-clock deadline on sim", lat, name)
				}
				at("op " + name)
				return fmt.Errorf("%s failed", name)
			}, func(err error) {
				inCallback = true
				defer func() { inCallback = false }()
				at("done " + name + ": " + err.Error())
			})
		}
		n.Attach("h1", 1, emulator.AgentFunc{OnStart: func(e emulator.Env) {
			inCallback = true
			defer func() { inCallback = false }()
			env = e
			e.After(0, func() { at("timer") })
			call("a")
			call("b")
			at("start returns")
		}})
		s.Run()
		want := []string{"start returns@0s", "timer@0s",
			fmt.Sprintf("op a@%v", lat), fmt.Sprintf("done a: a failed@%v", lat),
			fmt.Sprintf("op b@%v", lat), fmt.Sprintf("done b: b failed@%v", lat)}
		if strings.Join(log, "\n") != strings.Join(want, "\n") {
			t.Errorf("latency %v:\n%s\nwant\n%s", lat, strings.Join(log, "\n"), strings.Join(want, "\n"))
		}
	}
}
