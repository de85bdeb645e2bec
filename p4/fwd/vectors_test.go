package fwd

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/tracebed/tracebed/emulator/frame"
	"github.com/tracebed/tracebed/topologies"
)

var update = flag.Bool("update", false, "rewrite testdata/vectors.json")

// Vectors is the content of testdata/vectors.json: frames into the star's
// switch and the frames expected out, then the counters. The Go pipeline
// (TestVectors) and bmv2 running fwd.p4 (TestVectorsBMv2) pass the same
// file. Frames out are compared from the EtherType on: the Go twin
// rewrites the Ethernet addresses for the next hop, fwd.p4 leaves that to
// a table it does not have. ECMP is not among the vectors: both twins keep
// a flow on one member of a group, but they hash differently (docs/bmv2.md).
type Vectors struct {
	// Hosts are the star's hosts by switch port: Hosts[i] is behind port i+1.
	Hosts   []string `json:"hosts"`
	Vectors []Vector `json:"vectors"`
	// Forwarded and Drops are the counters after all vectors: every
	// frame in is counted once.
	Forwarded uint64           `json:"forwarded"`
	Drops     [NumDrops]uint64 `json:"drop_counters"`
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

// vectorStar is the vectors' topology: a star of three hosts around "tor".
func vectorStar(t testing.TB) *topologies.Topology {
	t.Helper()
	f, err := topologies.Generate(topologies.Params{Generate: "star", Hosts: 3})
	if err != nil {
		t.Fatal(err)
	}
	top, err := f.Build("star")
	if err != nil {
		t.Fatal(err)
	}
	return top
}

// ipv4Frame builds an Ethernet/IPv4 frame from host from to address dst
// carrying l4 (a transport header and payload, not checked), with a
// correct header checksum.
func ipv4Frame(top *topologies.Topology, from int, dst netip.Addr, proto, tos, ttl uint8, l4 []byte) []byte {
	src := top.Hosts()[from]
	f := make([]byte, 14+20, 14+20+len(l4))
	copy(f[0:6], top.Node("tor").Ports[from].MAC[:])
	copy(f[6:12], src.MAC[:])
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	ip := f[14:]
	ip[0], ip[1] = 0x45, tos
	binary.BigEndian.PutUint16(ip[2:], uint16(20+len(l4)))
	binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF
	ip[8], ip[9] = ttl, proto
	s, d := src.IP.As4(), dst.As4()
	copy(ip[12:], s[:])
	copy(ip[16:], d[:])
	binary.BigEndian.PutUint16(ip[10:], frame.Checksum(ip[:20]))
	return append(f, l4...)
}

type fwdCase struct {
	name     string
	in       int // port
	frame    []byte
	wantPort int // 0: dropped
	wantPrio int
	drop     int // the drop reason, when dropped
}

func fwdCases(top *topologies.Topology) []fwdCase {
	hosts := top.Hosts()
	ip := func(i int) netip.Addr { return hosts[i].IP }
	udp := func(from, to int, tos, ttl uint8) []byte {
		return frame.AppendUDP(nil, frame.UDP{SrcMAC: hosts[from].MAC, DstMAC: top.Node("tor").Ports[from].MAC,
			Src: netip.AddrPortFrom(ip(from), 4000), Dst: netip.AddrPortFrom(ip(to), 5000), TOS: tos, TTL: ttl}, []byte("tracebed fwd vector"))
	}
	tcp := make([]byte, 20+6)
	binary.BigEndian.PutUint16(tcp[0:], 43210)
	binary.BigEndian.PutUint16(tcp[2:], 80)
	tcp[12] = 5 << 4
	copy(tcp[20:], "GET /\n")
	icmp := []byte{8, 0, 0xf7, 0xfe, 0, 1, 0, 0} // echo request, id 1 seq 0
	arp := make([]byte, 14+28)
	copy(arp[0:6], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	copy(arp[6:12], hosts[0].MAC[:])
	binary.BigEndian.PutUint16(arp[12:], 0x0806)
	version6 := udp(0, 2, 0, 64)
	version6[14] = 0x65 // version 6, IHL 5: not IPv4 although the EtherType says so
	long := udp(1, 0, 0, 64)
	binary.BigEndian.PutUint16(long[16:], uint16(len(long)-14+8)) // total length beyond the frame
	binary.BigEndian.PutUint16(long[24:], 0)
	binary.BigEndian.PutUint16(long[24:], frame.Checksum(long[14:34]))
	ttl0 := udp(1, 2, 0, 64)
	ttl0[22] = 0 // AppendUDP makes TTL 0 its default, 64
	binary.BigEndian.PutUint16(ttl0[24:], 0)
	binary.BigEndian.PutUint16(ttl0[24:], frame.Checksum(ttl0[14:34]))
	opts := udp(0, 2, 0, 64)
	opts = append(opts[:34:34], append([]byte{1, 1, 1, 0}, opts[34:]...)...) // NOP, NOP, NOP, end of options
	opts[14] = 0x46
	binary.BigEndian.PutUint16(opts[16:], uint16(len(opts)-14))
	binary.BigEndian.PutUint16(opts[24:], 0)
	binary.BigEndian.PutUint16(opts[24:], frame.Checksum(opts[14:38]))
	short := append(udp(0, 1, 0, 64)[:14], 0x45, 0, 0, 20) // an IPv4 header cut after 4 bytes
	badSum := udp(0, 2, 0, 64)
	badSum[24] ^= 0x5a // the header checksum, wrong
	return []fwdCase{
		{name: "UDP h1 to h3", in: 1, frame: udp(0, 2, 0, 64), wantPort: 3},
		{name: "UDP h3 to h1, DSCP CS3 to queue 3, ECN kept", in: 3, frame: udp(2, 0, 3<<5|1, 64), wantPort: 1, wantPrio: 3},
		{name: "TCP h2 to h1, DSCP CS5 to queue 5", in: 2, frame: ipv4Frame(top, 1, ip(0), 6, 5<<5, 64, tcp), wantPort: 1, wantPrio: 5},
		{name: "ICMP echo h3 to h2, DSCP EF (46) to queue 5", in: 3, frame: ipv4Frame(top, 2, ip(1), 1, 46<<2, 64, icmp), wantPort: 2, wantPrio: 5},
		{name: "TTL 2 leaves with TTL 1", in: 1, frame: udp(0, 1, 0, 2), wantPort: 2},
		{name: "TTL 1: dropped (ttl)", in: 1, frame: udp(0, 1, 0, 1), drop: DropTTL},
		{name: "TTL 0: dropped (ttl)", in: 2, frame: ttl0, drop: DropTTL},
		{name: "no route to 192.0.2.9: dropped (no_route)", in: 1, frame: ipv4Frame(top, 0, netip.MustParseAddr("192.0.2.9"), 17, 0, 64, make([]byte, 12)), drop: DropNoRoute},
		{name: "ARP: dropped (malformed, not IPv4)", in: 1, frame: arp, drop: DropMalformed},
		{name: "IPv4 EtherType, version 6: dropped (malformed)", in: 1, frame: version6, drop: DropMalformed},
		{name: "IPv4 header with options (IHL 6): dropped (malformed)", in: 1, frame: opts, drop: DropMalformed},
		{name: "total length beyond the frame: dropped (malformed)", in: 2, frame: long, drop: DropMalformed},
		{name: "frame ends inside the IPv4 header: dropped (malformed)", in: 1, frame: short, drop: DropMalformed},
		// Neither twin verifies the header checksum (fwd.p4 has no
		// verify_checksum); both compute it anew (update_checksum).
		{name: "wrong IPv4 header checksum: forwarded, and leaves with the right one", in: 1, frame: badSum, wantPort: 3},
	}
}

// TestVectors runs the vectors through the Go pipeline: each case's
// egress port, priority and drop reason are checked against the case, and
// the frames and counters against testdata/vectors.json (rewritten by
// -update).
func TestVectors(t *testing.T) {
	top := vectorStar(t)
	p := New(top.Node("tor"), top.Routes()["tor"])
	got := Vectors{}
	for _, h := range top.Hosts() {
		got.Hosts = append(got.Hosts, h.IP.String())
	}
	for _, tc := range fwdCases(top) {
		before := p.Counters
		var c capture
		p.Process(0, tc.in, append([]byte(nil), tc.frame...), &c)
		switch {
		case tc.wantPort == 0 && (len(c.out) != 0 || p.Counters.Drops[tc.drop] != before.Drops[tc.drop]+1):
			t.Errorf("%s: out %+v, drops %v → %v; want a drop counted at %d", tc.name, c.out, before.Drops, p.Counters.Drops, tc.drop)
		case tc.wantPort != 0 && (len(c.out) != 1 || c.out[0].Port != tc.wantPort || c.out[0].Priority != tc.wantPrio):
			t.Errorf("%s: out %+v, want port %d priority %d", tc.name, c.out, tc.wantPort, tc.wantPrio)
		case tc.wantPort != 0:
			f, _ := hex.DecodeString(c.out[0].Frame)
			if frame.Checksum(f[14:34]) != 0 || f[22] != tc.frame[22]-1 {
				t.Errorf("%s: TTL %d → %d or header checksum wrong", tc.name, tc.frame[22], f[22])
			}
		}
		got.Vectors = append(got.Vectors, Vector{Name: tc.name, InPort: tc.in, Frame: hex.EncodeToString(tc.frame), Out: c.out})
	}
	got.Forwarded, got.Drops = p.Counters.Forwarded, p.Counters.Drops
	if n := uint64(len(got.Vectors)); p.Counters.Total() != n {
		t.Errorf("counters %+v account for %d frames, want %d", p.Counters, p.Counters.Total(), n)
	}
	path := filepath.Join("testdata", "vectors.json")
	if *update {
		b, err := json.MarshalIndent(got, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if want := readVectors(t); !reflect.DeepEqual(got, want) {
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
