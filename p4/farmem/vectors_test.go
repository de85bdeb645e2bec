package farmem

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/tracebed/tracebed/emulator/frame"
	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/p4/fwd"
	"github.com/tracebed/tracebed/topologies"
)

var update = flag.Bool("update", false, "rewrite testdata/vectors.json")

// Vectors is the content of testdata/vectors.json: the table entries to
// install, then frames in and the frames expected out. The Go pipeline
// (TestVectors) and bmv2 running farmem.p4 (TestBmv2Vectors) pass the same
// file. Frames out are compared from the EtherType on: the Go twin rewrites
// the Ethernet addresses for the next hop, farmem.p4 (like fwd.p4) leaves
// that to a table it does not have.
type Vectors struct {
	// Hosts are the star's hosts by switch port: Hosts[i] is behind port i+1.
	Hosts   []string `json:"hosts"`
	Rules   []Rule   `json:"rules"`
	Vectors []Vector `json:"vectors"`
	// Class and Stats are the counters after all vectors (class counters
	// listed only where nonzero, by index type<<3|urgency).
	Class map[int][2]uint64 `json:"class_counters"` // [packets, bytes]
	Stats [NumStats]uint64  `json:"stats_counters"`
	// Forwarded and Drops are the forwarding counters (ingress.forwarded,
	// ingress.drops by reason): every frame in is counted in exactly one.
	Forwarded uint64               `json:"forwarded"`
	Drops     [fwd.NumDrops]uint64 `json:"drop_counters"`
}

// Vector is one frame through the pipeline.
type Vector struct {
	Name   string `json:"name"`
	InPort int    `json:"in_port"`
	Frame  string `json:"frame"` // hex
	Out    []Out  `json:"out"`   // empty: dropped
}

// Out is one emitted frame.
type Out struct {
	Port     int    `json:"port"`
	Priority int    `json:"priority"`
	Frame    string `json:"frame"` // hex
}

type capture struct{ out []Out }

func (c *capture) Emit(port, prio int, f []byte) {
	c.out = append(c.out, Out{Port: port, Priority: prio, Frame: hex.EncodeToString(f)})
}

// starPipeline returns the pipeline of a star switch with three hosts.
func starPipeline(t testing.TB) (*Pipeline, *topologies.Topology) {
	t.Helper()
	f, err := topologies.Generate(topologies.Params{Generate: "star", Hosts: 3})
	if err != nil {
		t.Fatal(err)
	}
	top, err := f.Build("star")
	if err != nil {
		t.Fatal(err)
	}
	sw := top.Node("tor")
	return New(fwd.New(sw, top.Routes()["tor"])), top
}

// glitterRules are the rules the vectors install: demand fetches at the top
// priority, writes and acks at their urgency (urgency 0 left to the default).
func glitterRules() []Rule {
	r := []Rule{{TypeRead, 0, 7}, {TypeData, 0, 7}}
	for u := uint8(1); u <= MaxUrgency; u++ {
		r = append(r, Rule{TypeWrite, u, u}, Rule{TypeAck, u, u})
	}
	return r
}

type vectorCase struct {
	name     string
	in       int
	from, to int // host indexes (0-based)
	srcPort  uint16
	dstPort  uint16
	tos      uint8
	ttl      uint8
	payload  []byte
	wantPort int // 0: dropped
	wantPrio int
	wantTOS  uint8
	// corrupt, if set, damages the frame after it is built (its UDP
	// checksum no longer matches).
	corrupt func(f []byte)
}

func msg(h Header, dataLen int) []byte {
	return h.Append(nil, make([]byte, dataLen))
}

func vectorCases() []vectorCase {
	page := 4096
	return []vectorCase{
		{name: "read request, top priority", in: 1, from: 0, to: 2, srcPort: HostPort, dstPort: Port,
			payload: msg(Header{Type: TypeRead, ID: 1, Page: 42}, 0), wantPort: 3, wantPrio: 7, wantTOS: 7 << 5},
		{name: "data response carrying the page", in: 3, from: 2, to: 0, srcPort: Port, dstPort: HostPort,
			payload: msg(Header{Type: TypeData, ID: 1, Page: 42, Version: 3, Sum: 0xdeadbeef}, page), wantPort: 1, wantPrio: 7, wantTOS: 7 << 5},
		{name: "not-found data response", in: 3, from: 2, to: 1, srcPort: Port, dstPort: HostPort,
			payload: msg(Header{Type: TypeData, Flags: FlagNotFound, ID: 9, Page: 1}, 0), wantPort: 2, wantPrio: 7, wantTOS: 7 << 5},
		{name: "write urgency 3", in: 2, from: 1, to: 2, srcPort: HostPort, dstPort: Port,
			payload: msg(Header{Type: TypeWrite, Urgency: 3, ID: 2, Page: 7, Version: 1}, page), wantPort: 3, wantPrio: 3, wantTOS: 3 << 5},
		{name: "write urgency 7 (blocked), retransmitted, ECN kept", in: 1, from: 0, to: 2, srcPort: HostPort, dstPort: Port, tos: 0x01,
			payload: msg(Header{Type: TypeWrite, Urgency: 7, Flags: FlagRetransmit, ID: 3, Page: 8, Version: 2}, page), wantPort: 3, wantPrio: 7, wantTOS: 7<<5 | 0x01},
		{name: "write urgency 0 misses: DSCP priority", in: 1, from: 0, to: 2, srcPort: HostPort, dstPort: Port, tos: 1 << 5,
			payload: msg(Header{Type: TypeWrite, ID: 4, Page: 9, Version: 1}, page), wantPort: 3, wantPrio: 1, wantTOS: 1 << 5},
		{name: "ack echoes urgency 5", in: 3, from: 2, to: 0, srcPort: Port, dstPort: HostPort,
			payload: msg(Header{Type: TypeAck, Urgency: 5, ID: 3, Page: 8, Version: 2}, 0), wantPort: 1, wantPrio: 5, wantTOS: 5 << 5},
		{name: "bad magic on the port: forwarded unclassified", in: 1, from: 0, to: 2, srcPort: HostPort, dstPort: Port, tos: 2 << 5,
			payload: []byte("not a far-memory message at all"), wantPort: 3, wantPrio: 2, wantTOS: 2 << 5},
		{name: "read with data is malformed", in: 1, from: 0, to: 2, srcPort: HostPort, dstPort: Port,
			payload: msg(Header{Type: TypeRead, ID: 5}, 512), wantPort: 3, wantPrio: 0, wantTOS: 0},
		{name: "write with a short page is malformed", in: 1, from: 0, to: 2, srcPort: HostPort, dstPort: Port,
			payload: msg(Header{Type: TypeWrite, Urgency: 6, ID: 6}, 100), wantPort: 3, wantPrio: 0, wantTOS: 0},
		{name: "other UDP traffic keeps its DSCP class", in: 2, from: 1, to: 0, srcPort: 5001, dstPort: 5001, tos: 4 << 5,
			payload: msg(Header{Type: TypeRead}, 0), wantPort: 1, wantPrio: 4, wantTOS: 4 << 5},
		{name: "TTL 1 is dropped before classification", in: 1, from: 0, to: 2, srcPort: HostPort, dstPort: Port, ttl: 1,
			payload: msg(Header{Type: TypeRead, ID: 7}, 0), wantPort: 0},
		{name: "a bit flipped in the page: dropped (checksum), never stored", in: 1, from: 0, to: 2, srcPort: HostPort, dstPort: Port,
			payload: msg(Header{Type: TypeWrite, Urgency: 3, ID: 8, Page: 7, Version: 2}, page), wantPort: 0,
			corrupt: func(f []byte) { f[len(f)-100] ^= 0x04 }},
		{name: "a bit flipped in the page number: dropped (checksum)", in: 1, from: 0, to: 2, srcPort: HostPort, dstPort: Port,
			payload: msg(Header{Type: TypeRead, ID: 9, Page: 7}, 0), wantPort: 0,
			corrupt: func(f []byte) { f[frame.HeaderLen+15] ^= 0x01 }},
		{name: "no UDP checksum (zero): dropped (checksum)", in: 3, from: 2, to: 0, srcPort: Port, dstPort: HostPort,
			payload: msg(Header{Type: TypeAck, Urgency: 1, ID: 10, Page: 8, Version: 2}, 0), wantPort: 0,
			corrupt: frame.ClearUDPChecksum},
	}
}

func buildFrame(top *topologies.Topology, tc vectorCase) []byte {
	hosts := top.Hosts()
	src, dst := hosts[tc.from], hosts[tc.to]
	h := frame.UDP{
		SrcMAC: src.MAC, DstMAC: top.Node("tor").Ports[tc.from].MAC,
		Src: netip.AddrPortFrom(src.IP, tc.srcPort), Dst: netip.AddrPortFrom(dst.IP, tc.dstPort),
		TOS: tc.tos, TTL: tc.ttl,
	}
	return frame.AppendUDP(nil, h, tc.payload)
}

func program(t testing.TB, p *Pipeline, rules []Rule) {
	t.Helper()
	if err := Program(context.Background(), p4rt.Local(p), rules); err != nil {
		t.Fatal(err)
	}
}

// TestVectors runs the vectors through the Go pipeline: each case's egress
// port, priority and DSCP are checked against the expectation written in the
// case, and the frames against testdata/vectors.json (rewritten by -update).
func TestVectors(t *testing.T) {
	p, top := starPipeline(t)
	rules := glitterRules()
	program(t, p, rules)
	got := Vectors{Rules: rules, Class: map[int][2]uint64{}}
	for _, h := range top.Hosts() {
		got.Hosts = append(got.Hosts, h.IP.String())
	}
	for _, tc := range vectorCases() {
		in := buildFrame(top, tc)
		if tc.corrupt != nil {
			tc.corrupt(in)
		}
		v := Vector{Name: tc.name, InPort: tc.in, Frame: hex.EncodeToString(in)}
		var c capture
		p.Process(0, tc.in, append([]byte(nil), in...), &c)
		v.Out = c.out
		switch {
		case tc.wantPort == 0 && len(c.out) != 0:
			t.Errorf("%s: forwarded %+v, want a drop", tc.name, c.out)
		case tc.wantPort != 0 && len(c.out) != 1:
			t.Errorf("%s: %d frames out, want 1", tc.name, len(c.out))
		case tc.wantPort != 0:
			o := c.out[0]
			f, _ := hex.DecodeString(o.Frame)
			if o.Port != tc.wantPort || o.Priority != tc.wantPrio || frame.TOS(f) != tc.wantTOS {
				t.Errorf("%s: port %d prio %d tos %#x, want %d %d %#x", tc.name, o.Port, o.Priority, frame.TOS(f), tc.wantPort, tc.wantPrio, tc.wantTOS)
			}
			if _, _, err := frame.ParseUDP(f); err != nil {
				t.Errorf("%s: the frame out is not valid UDP/IPv4 (checksum or length): %v", tc.name, err)
			}
			if frame.Checksum(f[14:34]) != 0 {
				t.Errorf("%s: IPv4 header checksum wrong after re-marking", tc.name)
			}
		}
		got.Vectors = append(got.Vectors, v)
	}
	for i := range NumClasses {
		if p.Counters.ClassPackets[i] != 0 {
			got.Class[i] = [2]uint64{p.Counters.ClassPackets[i], p.Counters.ClassBytes[i]}
		}
	}
	got.Stats = p.Counters.Stats
	got.Forwarded, got.Drops = p.Base().Counters.Forwarded, p.Base().Counters.Drops
	if n := uint64(len(vectorCases())); got.Forwarded+sum(got.Drops[:]) != n {
		t.Errorf("forwarded %d and drops %v do not add up to the %d frames in", got.Forwarded, got.Drops, n)
	}
	if got.Drops[fwd.DropChecksum] != 3 {
		t.Errorf("%d checksum drops, want the 3 damaged frames", got.Drops[fwd.DropChecksum])
	}
	if want := [NumStats]uint64{6, 1, 3, 0}; got.Stats != want {
		t.Errorf("stats counters %v, want %v (classified, default, malformed)", got.Stats, want)
	}
	path := filepath.Join("testdata", "vectors.json")
	if *update {
		b, err := json.MarshalIndent(got, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want := readVectors(t)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("pipeline output differs from %s (run go test -update after checking the change)", path)
	}
}

func readVectors(t testing.TB) Vectors {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "vectors.json"))
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	var v Vectors
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func sum(xs []uint64) uint64 {
	var n uint64
	for _, x := range xs {
		n += x
	}
	return n
}
