package freeina

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"testing"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"

	"github.com/tracebed/tracebed/emulator/frame"
	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/emulator/roce/wire"
	"github.com/tracebed/tracebed/p4/fwd"
	"github.com/tracebed/tracebed/topologies"
)

// The test harness: a star switch "tor" of a few hosts running FreeINA,
// hosts that build the INA packets their RNICs would send, and a capture
// of what the pipeline emits.

// vectorSlots is the switch memory of the vectors' star: 8192 aggregators
// of 64 values, as ina's vectors and the ready star.
const vectorAggregators = 8192

func starTopology(t testing.TB, hosts int) *topologies.Topology {
	t.Helper()
	f, err := topologies.Generate(topologies.Params{Generate: "star", Name: "vectors", Hosts: hosts, Aggregators: vectorAggregators})
	if err != nil {
		t.Fatal(err)
	}
	top, err := f.Build("vectors")
	if err != nil {
		t.Fatal(err)
	}
	return top
}

func newPipeline(t testing.TB, top *topologies.Topology, k int) *Pipeline {
	t.Helper()
	sw := top.Node("tor")
	p, err := New(Config{K: k, Slots: SlotsFor(sw.Aggregators, k)}, fwd.New(sw, top.Routes()["tor"]))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// ringSpec is a job's ring as the vectors and tests describe it: worker i
// on host Hosts[i] (1-based: h1 …), its receive QP QPN[i], its result
// region RKey[i], VA[i].
type ringSpec struct {
	Job   uint16   `json:"job"`
	Group uint16   `json:"group"`
	Hosts []int    `json:"hosts"`
	QPN   []uint32 `json:"qpn"`
	RKey  []uint32 `json:"rkey"`
	VA    []uint64 `json:"va"`
}

func (r ringSpec) n() int { return len(r.Hosts) }

func hostIP(top *topologies.Topology, h int) netip.Addr { return top.Node(fmt.Sprintf("h%d", h)).IP }

// ring returns the Ring of r on top: connection i from worker i to worker
// i+1.
func (r ringSpec) ring(top *topologies.Topology) Ring {
	out := Ring{Job: r.Job, Group: r.Group}
	for i := range r.Hosts {
		j := (i + 1) % r.n()
		out.Links = append(out.Links, Link{Src: hostIP(top, r.Hosts[i]), Dst: hostIP(top, r.Hosts[j]), Sport: wire.Port,
			QPN: r.QPN[j], RKey: r.RKey[j], VA: r.VA[j]})
	}
	return out
}

// bindSpec is an all-reduce binding with the PSN of chunk 0 per worker.
type bindSpec struct {
	Job     uint16   `json:"job"`
	Gen     uint32   `json:"gen"`
	Base    uint32   `json:"base"`
	Size    uint32   `json:"size"`
	Chunks  uint32   `json:"chunks"`
	Workers uint8    `json:"workers"`
	Group   uint16   `json:"group"`
	PSN     []uint32 `json:"psn"`
}

func (b bindSpec) binding() Binding {
	return Binding{Job: b.Job, Gen: b.Gen, Base: b.Base, Size: b.Size, Chunks: b.Chunks, Workers: b.Workers, Group: b.Group}
}

// program installs rings and bindings through P4Runtime names.
func program(t testing.TB, p *Pipeline, top *topologies.Topology, rings []ringSpec, binds []bindSpec) {
	t.Helper()
	ctl, err := NewController(p4rt.Local(p))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, r := range rings {
		if err := ctl.AddRing(ctx, top, "tor", r.ring(top)); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range binds {
		if err := ctl.Bind(ctx, b.binding(), b.PSN); err != nil {
			t.Fatal(err)
		}
	}
}

// inaFrame is the frame worker w of ring r sends for a chunk: an RDMA
// WRITE only with immediate, on its connection to worker w+1, with PSN
// psn, to the receiver's region at chunk's offset.
func inaFrame(top *topologies.Topology, r ringSpec, w int, psn, chunk uint32, vals []int32) []byte {
	j := (w + 1) % r.n()
	src, dst := top.Node(fmt.Sprintf("h%d", r.Hosts[w])), top.Node(fmt.Sprintf("h%d", r.Hosts[j]))
	h := wire.Header{BTH: wire.BTH{Opcode: wire.WriteOnlyImm, PKey: wire.DefaultPKey, DestQP: r.QPN[j], AckReq: true, PSN: psn & wire.PSNMask},
		RETH: wire.RETH{VA: r.VA[j] + uint64(chunk)*uint64(4*len(vals)), RKey: r.RKey[j], Length: uint32(4 * len(vals))}, Imm: chunk}
	return hostFrame(src, dst, &h, valueBytes(vals))
}

// hostFrame is the frame a host's RNIC sends to dst: UDP 4791 to 4791,
// identification 0 with DF, TTL 64, as tracebed's hosts do.
func hostFrame(src, dst *topologies.Node, h *wire.Header, payload []byte) []byte {
	s, d := netip.AddrPortFrom(src.IP, wire.Port), netip.AddrPortFrom(dst.IP, wire.Port)
	ib := wire.Append(nil, h, payload, wire.HostPseudo(s, d))
	return frame.AppendUDP(nil, frame.UDP{SrcMAC: src.MAC, DstMAC: src.Uplink().MAC, Src: s, Dst: d}, ib)
}

func valueBytes(vals []int32) []byte {
	b := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.BigEndian.PutUint32(b[4*i:], uint32(v))
	}
	return b
}

// capture records what a pipeline emits.
type capture struct{ out []vectorPacket }

func newCapture() *capture { return &capture{out: []vectorPacket{}} }

func (c *capture) Emit(port, _ int, f []byte) {
	c.out = append(c.out, vectorPacket{Port: port, Frame: hex.EncodeToString(f)})
}

// decoded is an emitted RoCEv2 frame, parsed.
type decoded struct {
	port int
	udp  frame.UDP
	pkt  wire.Packet
	vals []int32
}

func decode(t testing.TB, vp vectorPacket) decoded {
	t.Helper()
	f, err := hex.DecodeString(vp.Frame)
	if err != nil {
		t.Fatal(err)
	}
	if err := wire.VerifyFrame(f); err != nil {
		t.Fatalf("frame out of port %d: %v", vp.Port, err)
	}
	u, pkt, err := wire.ParseFrame(f)
	if err != nil {
		t.Fatalf("frame out of port %d: %v", vp.Port, err)
	}
	if frame.Checksum(f[frame.EthLen:frame.EthLen+frame.IPv4Len]) != 0 {
		t.Fatalf("frame out of port %d: bad IPv4 header checksum", vp.Port)
	}
	var vals []int32
	for i := 0; i+4 <= len(pkt.Payload); i += 4 {
		vals = append(vals, int32(binary.BigEndian.Uint32(pkt.Payload[i:])))
	}
	return decoded{port: vp.Port, udp: u, pkt: pkt, vals: vals}
}

// deleteBinding removes job's binding (the end of its all-reduce).
func deleteBinding(t testing.TB, p *Pipeline, job uint16) {
	t.Helper()
	ctl, err := NewController(p4rt.Local(p))
	if err != nil {
		t.Fatal(err)
	}
	if err := ctl.Unbind(context.Background(), job); err != nil {
		t.Fatal(err)
	}
}

var _ = p4v1.Update_INSERT
