package ina

import (
	"context"
	"net/netip"
	"testing"

	"github.com/tracebed/tracebed/emulator/frame"
	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/p4/fwd"
	"github.com/tracebed/tracebed/topologies"
)

// emitted is one frame a pipeline emitted.
type emitted struct {
	Port  int
	Frame []byte
}

type capture struct{ out []emitted }

func (c *capture) Emit(port, _ int, f []byte) { c.out = append(c.out, emitted{port, f}) }

// rig is a switch "tor" with hosts h1..h5 on ports 1..5 running the INA
// pipeline, programmed through its P4Runtime device.
type rig struct {
	t   testing.TB
	top *topologies.Topology
	p   *Pipeline
	ctl *Controller
	k   int
}

func newRig(t testing.TB, k, aggregators int) *rig {
	t.Helper()
	f, err := topologies.Generate(topologies.Params{Generate: "star", Name: "rig", Hosts: 5, Aggregators: aggregators})
	if err != nil {
		t.Fatal(err)
	}
	top, err := f.Build("rig")
	if err != nil {
		t.Fatal(err)
	}
	sw := top.Node("tor")
	p, err := New(Config{K: k, Aggregators: sw.Aggregators}, fwd.New(sw, top.Routes()["tor"]))
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := NewController(p4rt.Local(p))
	if err != nil {
		t.Fatal(err)
	}
	return &rig{t: t, top: top, p: p, ctl: ctl, k: k}
}

func (r *rig) host(i int) *topologies.Node { return r.top.Node("h" + string(rune('0'+i))) }

func (r *rig) addr(i int) netip.AddrPort { return netip.AddrPortFrom(r.host(i).IP, 40000) }

func (r *rig) swAddr() netip.AddrPort { return netip.AddrPortFrom(r.top.Node("tor").IP, Port) }

// bind sets up group 1 with hosts 1..n and binds job b.
func (r *rig) bind(b Binding, n int) {
	r.t.Helper()
	var ws []netip.AddrPort
	for i := 1; i <= n; i++ {
		ws = append(ws, r.addr(i))
	}
	ctx := context.Background()
	if _, err := r.ctl.Bindings(ctx, b.Job); err != nil {
		r.t.Fatal(err)
	}
	if err := r.ctl.SetGroup(ctx, b.Group, must(Members(r.top, "tor", ws))); err != nil && b.Group != 0 {
		r.t.Logf("group %d: %v (already set?)", b.Group, err)
	}
	if err := r.ctl.Bind(ctx, b); err != nil {
		r.t.Fatal(err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// packet builds a frame from host i (its port 40000) to dst.
func (r *rig) packet(i int, dst netip.AddrPort, h Header, vals []int32) []byte {
	src := r.host(i)
	payload := Append(nil, h, vals)
	return frame.AppendUDP(nil, frame.UDP{SrcMAC: src.MAC, DstMAC: src.Ports[0].Peer.MAC, Src: r.addr(i), Dst: dst}, payload)
}

// data builds worker w's (host w+1) data packet to the switch.
func (r *rig) data(job uint16, w, n uint8, slot uint16, ver uint8, round, off uint32, flags uint8, vals []int32) []byte {
	h := Header{Flags: FlagData | flags, Job: job, Slot: slot, Ver: ver, Worker: w, Workers: n, Round: round, Offset: off, Bitmap: 1 << w}
	return r.packet(int(w)+1, r.swAddr(), h, vals)
}

// in processes a frame arriving from host i's port and returns what left.
func (r *rig) in(port int, f []byte) []emitted {
	var c capture
	r.p.Process(0, port, f, &c)
	return c.out
}

func (r *rig) vals(base int32) []int32 {
	v := make([]int32, r.k)
	for i := range v {
		v[i] = base + int32(i)
	}
	return v
}

// decode parses an emitted INA frame.
func decode(t testing.TB, f []byte) (frame.UDP, Header, []int32) {
	t.Helper()
	u, payload, err := frame.ParseUDP(f)
	if err != nil {
		t.Fatalf("emitted frame: %v", err)
	}
	if frame.Checksum(f[frame.EthLen:frame.EthLen+frame.IPv4Len]) != 0 {
		t.Fatalf("emitted frame has a bad IPv4 checksum")
	}
	if present, ok := frame.UDPChecksum(f); !present || !ok {
		t.Fatalf("emitted frame has no correct UDP checksum (present %v)", present)
	}
	h, vals, err := Parse(payload)
	if err != nil {
		t.Fatalf("emitted INA packet: %v", err)
	}
	v := make([]int32, h.K)
	GetValues(v, vals)
	return u, h, v
}

func netipPort(a netip.AddrPort, port uint16) netip.AddrPort {
	return netip.AddrPortFrom(a.Addr(), port)
}
