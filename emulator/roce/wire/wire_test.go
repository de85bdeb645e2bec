package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tracebed/tracebed/emulator/frame"
)

var update = flag.Bool("update", false, "rewrite testdata/vectors.txt")

// vector is a packet of the shared vectors: a whole Ethernet frame as a
// tracebed host sends it.
type vector struct {
	name    string
	h       Header
	payload []byte
}

var (
	srcAddr = netip.MustParseAddrPort("10.0.0.1:4791")
	dstAddr = netip.MustParseAddrPort("10.0.0.2:4791")
)

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

// vectors covers every supported opcode, pads 0–3, PSN wrap and the
// header bits.
func vectors() []vector {
	bth := func(op Opcode, qp, psn uint32) BTH {
		return BTH{Opcode: op, PKey: DefaultPKey, DestQP: qp, PSN: psn}
	}
	reth := RETH{VA: 0x00007f0000001000, RKey: 0x00000107, Length: 8192}
	v := []vector{
		{"send-only", Header{BTH: bth(SendOnly, 0x11, 0)}, pattern(64, 1)},
		{"send-only-pad3", Header{BTH: bth(SendOnly, 0x11, 1)}, pattern(61, 2)},
		{"send-only-empty", Header{BTH: bth(SendOnly, 0x11, 2)}, nil},
		{"send-only-imm", Header{BTH: bth(SendOnlyImm, 0x11, 3), Imm: 0xdeadbeef}, pattern(30, 3)},
		{"send-first", Header{BTH: bth(SendFirst, 0x11, 4)}, pattern(256, 4)},
		{"send-middle", Header{BTH: bth(SendMiddle, 0x11, 5)}, pattern(256, 5)},
		{"send-last", Header{BTH: BTH{Opcode: SendLast, PKey: DefaultPKey, DestQP: 0x11, PSN: 6, AckReq: true, SE: true}}, pattern(17, 6)},
		{"send-last-imm", Header{BTH: bth(SendLastImm, 0x11, 7), Imm: 42}, pattern(1, 7)},
		{"write-first", Header{BTH: bth(WriteFirst, 0x12, PSNMask), RETH: reth}, pattern(4096, 8)},
		{"write-middle-wrap", Header{BTH: bth(WriteMiddle, 0x12, 0)}, pattern(4096, 9)},
		{"write-last", Header{BTH: BTH{Opcode: WriteLast, PKey: DefaultPKey, DestQP: 0x12, PSN: 1, AckReq: true}}, pattern(2, 10)},
		{"write-last-imm", Header{BTH: bth(WriteLastImm, 0x12, 2), Imm: 7}, pattern(1024, 11)},
		{"write-only", Header{BTH: bth(WriteOnly, 0x12, 3), RETH: RETH{VA: 0x1000, RKey: 0x207, Length: 100}}, pattern(100, 12)},
		{"write-only-imm", Header{BTH: bth(WriteOnlyImm, 0x12, 4), RETH: RETH{VA: 0x2000, RKey: 0x207, Length: 3}, Imm: 0x01020304}, pattern(3, 13)},
		{"write-only-zero", Header{BTH: bth(WriteOnly, 0x12, 5), RETH: RETH{VA: 0, RKey: 0x207, Length: 0}}, nil},
		{"read-request", Header{BTH: BTH{Opcode: ReadRequest, PKey: DefaultPKey, DestQP: 0x13, PSN: 100, AckReq: true}, RETH: reth}, nil},
		{"read-response-first", Header{BTH: bth(ReadResponseFirst, 0x14, 100), AETH: AETH{Syndrome: ACKSyndrome(CreditsUnlimited), MSN: 9}}, pattern(1024, 14)},
		{"read-response-middle", Header{BTH: bth(ReadResponseMiddle, 0x14, 101)}, pattern(1024, 15)},
		{"read-response-last", Header{BTH: bth(ReadResponseLast, 0x14, 102), AETH: AETH{Syndrome: ACKSyndrome(CreditsUnlimited), MSN: 9}}, pattern(513, 16)},
		{"read-response-only", Header{BTH: bth(ReadResponseOnly, 0x14, 103), AETH: AETH{Syndrome: ACKSyndrome(5), MSN: 10}}, pattern(8, 17)},
		{"ack", Header{BTH: bth(Acknowledge, 0x14, 200), AETH: AETH{Syndrome: ACKSyndrome(CreditsUnlimited), MSN: 0xabcdef}}, nil},
		{"nak-sequence", Header{BTH: bth(Acknowledge, 0x14, 201), AETH: AETH{Syndrome: NAKSyndrome(NAKSequence), MSN: 12}}, nil},
		{"nak-invalid", Header{BTH: bth(Acknowledge, 0x14, 202), AETH: AETH{Syndrome: NAKSyndrome(NAKInvalid), MSN: 12}}, nil},
		{"nak-remote-access", Header{BTH: bth(Acknowledge, 0x14, 203), AETH: AETH{Syndrome: NAKSyndrome(NAKRemoteAccess), MSN: 12}}, nil},
		{"nak-remote-op", Header{BTH: bth(Acknowledge, 0x14, 204), AETH: AETH{Syndrome: NAKSyndrome(NAKRemoteOp), MSN: 12}}, nil},
		{"rnr-nak", Header{BTH: bth(Acknowledge, 0x14, 205), AETH: AETH{Syndrome: RNRSyndrome(12), MSN: 12}}, nil},
		{"ack-fecn-becn-migreq", Header{BTH: BTH{Opcode: Acknowledge, PKey: 0x8001, DestQP: 0xffffff, PSN: 0x123456, FECN: true, BECN: true, M: true}, AETH: AETH{Syndrome: ACKSyndrome(0)}}, nil},
		{"cnp", Header{BTH: BTH{Opcode: CNP, PKey: DefaultPKey, DestQP: 0x15, BECN: true}}, nil},
	}
	return v
}

// frameOf builds the frame a tracebed host sends for v.
func frameOf(v vector) []byte {
	ps := HostPseudo(srcAddr, dstAddr)
	udp := Append(nil, &v.h, v.payload, ps)
	return frame.AppendUDP(nil, frame.UDP{
		SrcMAC: frame.MAC{0x02, 0, 0, 0, 0, 1}, DstMAC: frame.MAC{0x02, 0, 0, 0, 0, 2},
		Src: srcAddr, Dst: dstAddr,
	}, udp)
}

// Describe formats the fields of a decoded packet, one line, for the
// vectors file and the transcript tests.
func describe(p Packet) string {
	var b strings.Builder
	fmt.Fprintf(&b, "opcode=%s se=%d m=%d pad=%d tver=%d pkey=%#04x fecn=%d becn=%d destqp=%#06x ackreq=%d psn=%d",
		p.Opcode, bit(p.SE), bit(p.M), p.Pad, p.TVer, p.PKey, bit(p.FECN), bit(p.BECN), p.DestQP, bit(p.AckReq), p.PSN)
	if p.Opcode.HasRETH() {
		fmt.Fprintf(&b, " reth.va=%#x reth.rkey=%#x reth.len=%d", p.RETH.VA, p.RETH.RKey, p.RETH.Length)
	}
	if p.Opcode.HasAETH() {
		fmt.Fprintf(&b, " aeth.syndrome=%#02x aeth.msn=%d", p.AETH.Syndrome, p.AETH.MSN)
	}
	if p.Opcode.HasImm() {
		fmt.Fprintf(&b, " imm=%#x", p.Imm)
	}
	fmt.Fprintf(&b, " payload=%d icrc=%#08x", len(p.Payload), p.ICRC)
	return b.String()
}

func bit(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestVectors checks every vector against testdata/vectors.txt: the frame
// bytes, their decoding and the ICRC. The file is the shared reference for
// the P4 programs that parse RoCEv2 (go test -update rewrites it).
func TestVectors(t *testing.T) {
	var out bytes.Buffer
	out.WriteString("# RoCEv2 packet vectors: whole Ethernet frames as a tracebed host sends them\n")
	out.WriteString("# (10.0.0.1:4791 -> 10.0.0.2:4791, IPv4 ID 0, DF, TTL 64, UDP checksum 0),\n")
	out.WriteString("# their decoded fields and the ICRC (as a little-endian word on the wire, shown as a number).\n")
	out.WriteString("# Generated by TestVectors in emulator/roce/wire; go test -update rewrites it.\n")
	for _, v := range vectors() {
		f := frameOf(v)
		if err := VerifyFrame(f); err != nil {
			t.Errorf("%s: %v", v.name, err)
		}
		_, payload, err := frame.ParseUDP(f)
		if err != nil {
			t.Fatalf("%s: %v", v.name, err)
		}
		h, p, err := ParseFrame(f)
		if err != nil || h.Src != srcAddr || h.Dst != dstAddr {
			t.Errorf("%s: %v, %v → %v", v.name, err, h.Src, h.Dst)
		}
		if !bytes.Equal(p.Payload, v.payload) && len(v.payload)+len(p.Payload) > 0 {
			t.Errorf("%s: payload round trip differs", v.name)
		}
		ps := HostPseudo(srcAddr, dstAddr)
		if !VerifyICRC(ps, payload) {
			t.Errorf("%s: VerifyICRC false", v.name)
		}
		fmt.Fprintf(&out, "\nname: %s\nframe: %s\nfields: %s\n", v.name, hex.EncodeToString(f), describe(p))
	}
	path := filepath.Join("testdata", "vectors.txt")
	if *update {
		if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(want, out.Bytes()) {
		t.Errorf("vectors differ from %s (go test -update rewrites it after an intended change)", path)
	}
}

// TestVectorsFile decodes the frames of testdata/vectors.txt and
// testdata/external.txt (captured from RNICs and from other tools'
// tests) and checks each frame's fields and ICRC as the file states them.
func TestVectorsFile(t *testing.T) {
	for _, file := range []string{"vectors.txt", "external.txt"} {
		vs, err := readVectors(filepath.Join("testdata", file))
		if err != nil {
			t.Fatal(err)
		}
		if len(vs) == 0 {
			t.Fatalf("%s: no vectors", file)
		}
		for _, v := range vs {
			crc, payload, err := FrameICRC(v.frame)
			if err != nil {
				t.Errorf("%s %s: %v", file, v.name, err)
				continue
			}
			if carried := binary.LittleEndian.Uint32(payload[len(payload)-ICRCLen:]); carried != crc {
				t.Errorf("%s %s: ICRC carried %#08x, computed %#08x", file, v.name, carried, crc)
			}
			if v.icrc != 0 && crc != v.icrc {
				t.Errorf("%s %s: ICRC %#08x, file says %#08x", file, v.name, crc, v.icrc)
			}
			if v.fields == "" {
				continue
			}
			p, err := Parse(payload)
			if err != nil {
				t.Errorf("%s %s: %v", file, v.name, err)
				continue
			}
			if got := describe(p); got != v.fields {
				t.Errorf("%s %s:\n got %s\nwant %s", file, v.name, got, v.fields)
			}
		}
	}
}

type fileVector struct {
	name   string
	frame  []byte
	fields string
	icrc   uint32
}

// readVectors reads a vectors file: "name:" lines start a vector,
// "frame:" gives its hex, "fields:" its decoding, "icrc:" the expected
// ICRC word; lines starting with '#' are comments.
func readVectors(path string) ([]fileVector, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []fileVector
	var cur *fileVector
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "":
		case strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "name:"):
			out = append(out, fileVector{name: strings.TrimSpace(strings.TrimPrefix(line, "name:"))})
			cur = &out[len(out)-1]
		case cur == nil:
			return nil, fmt.Errorf("%s:%d: data before a 'name:' line", path, i+1)
		case strings.HasPrefix(line, "frame:"):
			h := strings.ReplaceAll(strings.TrimSpace(strings.TrimPrefix(line, "frame:")), " ", "")
			if cur.frame, err = hex.DecodeString(h); err != nil {
				return nil, fmt.Errorf("%s:%d: %v", path, i+1, err)
			}
		case strings.HasPrefix(line, "fields:"):
			cur.fields = strings.TrimSpace(strings.TrimPrefix(line, "fields:"))
		case strings.HasPrefix(line, "icrc:"):
			if _, err := fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(line, "icrc:")), "%v", &cur.icrc); err != nil {
				return nil, fmt.Errorf("%s:%d: icrc: %v", path, i+1, err)
			}
		default:
			return nil, fmt.Errorf("%s:%d: unknown line %q", path, i+1, line)
		}
	}
	return out, nil
}

func TestParseErrors(t *testing.T) {
	good := func() []byte {
		h := Header{BTH: BTH{Opcode: WriteOnly, PKey: DefaultPKey, DestQP: 1}, RETH: RETH{Length: 5}}
		return Append(nil, &h, []byte{1, 2, 3, 4, 5}, HostPseudo(srcAddr, dstAddr))
	}
	for _, tc := range []struct {
		name string
		mut  func([]byte) []byte
		want error
	}{
		{"empty", func([]byte) []byte { return nil }, ErrShort},
		{"bth-only", func(b []byte) []byte { return b[:BTHLen] }, ErrShort},
		{"reth-cut", func(b []byte) []byte { return b[:BTHLen+8+ICRCLen] }, ErrShort},
		{"version", func(b []byte) []byte { b[1] |= 1; return b }, ErrVersion},
		{"atomic", func(b []byte) []byte { b[0] = byte(FetchAdd); return b }, ErrOpcode},
		{"uc", func(b []byte) []byte { b[0] = 0x24; return b }, ErrOpcode},
		{"unaligned", func(b []byte) []byte { return append(b[:len(b)-4], 0, 0, 0, 0, 0) }, ErrLength},
		{"pad-too-big", func(b []byte) []byte {
			return Append(nil, &Header{BTH: BTH{Opcode: SendOnly, Pad: 3}}, nil, Pseudo{})
		}, nil}, // Append computes the pad: an empty SEND has none
		{"ack-with-payload", func([]byte) []byte {
			b := Append(nil, &Header{BTH: BTH{Opcode: Acknowledge}}, nil, Pseudo{})
			return append(b[:len(b)-4], 1, 2, 3, 4, 0, 0, 0, 0)
		}, ErrLength},
		{"ack-with-pad", func([]byte) []byte {
			b := Append(nil, &Header{BTH: BTH{Opcode: Acknowledge}}, nil, Pseudo{})
			b[1] |= 0x20
			return b
		}, ErrLength},
	} {
		_, err := Parse(tc.mut(good()))
		if !errors.Is(err, tc.want) && !(err == nil && tc.want == nil) {
			t.Errorf("%s: error %v, want %v", tc.name, err, tc.want)
		}
	}
	b := good()
	b[len(b)-6] ^= 1 // a payload bit
	if VerifyICRC(HostPseudo(srcAddr, dstAddr), b) {
		t.Error("a flipped payload bit passed the ICRC")
	}
	b = good()
	b[4] = 0xc0            // FECN and BECN are masked
	b[BTHLen+RETHLen] ^= 0 // no change to covered bytes
	if !VerifyICRC(HostPseudo(srcAddr, dstAddr), b) {
		t.Error("FECN/BECN changed the ICRC; they are masked")
	}
	ps := HostPseudo(srcAddr, dstAddr)
	ps.ID = 1
	if VerifyICRC(ps, good()) {
		t.Error("the IPv4 identification is covered by the ICRC, but changing it passed")
	}
}

// TestFrameICRCMasks changes each masked field of a frame (TTL, TOS, IPv4
// and UDP checksums, FECN/BECN) and each covered one (an address, a
// port, a payload byte): only the covered ones change the ICRC.
func TestFrameICRCMasks(t *testing.T) {
	f := frameOf(vectors()[0])
	base, _, err := FrameICRC(f)
	if err != nil {
		t.Fatal(err)
	}
	ip := frame.EthLen
	udp := ip + frame.IPv4Len
	for _, tc := range []struct {
		name    string
		off     int
		covered bool
	}{
		{"tos", ip + 1, false}, {"ttl", ip + 8, false}, {"ip-checksum", ip + 10, false},
		{"udp-checksum", udp + 6, false}, {"bth-fecn-becn", udp + frame.UDPLen + 4, false},
		{"ip-id", ip + 4, true}, {"src-ip", ip + 12, true}, {"src-port", udp + 1, true},
		{"bth-psn", udp + frame.UDPLen + 11, true}, {"payload", udp + frame.UDPLen + BTHLen + 3, true},
	} {
		g := bytes.Clone(f)
		g[tc.off] ^= 0x41
		crc, _, err := FrameICRC(g)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if (crc != base) != tc.covered {
			t.Errorf("%s: ICRC changed=%v, want %v", tc.name, crc != base, tc.covered)
		}
	}
	// SetFrameICRC repairs a rewritten payload.
	g := bytes.Clone(f)
	g[udp+frame.UDPLen+BTHLen] ^= 0xff
	if VerifyFrame(g) == nil {
		t.Fatal("rewritten payload passed")
	}
	if err := SetFrameICRC(g); err != nil {
		t.Fatal(err)
	}
	if err := VerifyFrame(g); err != nil {
		t.Fatal(err)
	}
}

func TestPSN(t *testing.T) {
	for _, tc := range []struct {
		a, b uint32
		want int
	}{
		{5, 5, 0}, {6, 5, 1}, {5, 6, -1}, {0, PSNMask, 1}, {PSNMask, 0, -1},
		{1 << 22, 0, 1 << 22}, {1<<23 - 1, 0, 1<<23 - 1}, {1 << 23, 0, -(1 << 23)}, {0, 1 << 23, -(1 << 23)},
	} {
		if got := PSNDiff(tc.a, tc.b); got != tc.want {
			t.Errorf("PSNDiff(%d, %d) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
	if got := PSNAdd(PSNMask, 2); got != 1 {
		t.Errorf("PSNAdd wrap = %d", got)
	}
	if got := PSNAdd(0, -1); got != PSNMask {
		t.Errorf("PSNAdd(0,-1) = %d", got)
	}
}

func TestCreditsAndTimers(t *testing.T) {
	for c := uint8(0); c < 31; c++ {
		n, ok := DecodeCredits(c)
		if !ok || EncodeCredits(n) != c {
			t.Errorf("credit code %d: %d, %v, re-encoded %d", c, n, ok, EncodeCredits(n))
		}
	}
	if _, ok := DecodeCredits(CreditsUnlimited); ok {
		t.Error("code 31 decoded as a count")
	}
	if EncodeCredits(5) != 4 || EncodeCredits(100000) != 30 {
		t.Errorf("EncodeCredits rounds down: 5 → %d, 100000 → %d", EncodeCredits(5), EncodeCredits(100000))
	}
	if RNRTimer(0).Microseconds() != 655360 || RNRTimer(1).Microseconds() != 10 || RNRTimer(31).Microseconds() != 491520 {
		t.Errorf("RNR timers: %v %v %v", RNRTimer(0), RNRTimer(1), RNRTimer(31))
	}
	if AckTimeout(0) != 0 || AckTimeout(1).Nanoseconds() != 8192 || AckTimeout(14).Microseconds() != 67108 {
		t.Errorf("ACK timeouts: %v %v %v", AckTimeout(0), AckTimeout(1), AckTimeout(14))
	}
}

func BenchmarkAppend4K(b *testing.B) {
	h := Header{BTH: BTH{Opcode: WriteMiddle, PKey: DefaultPKey, DestQP: 1}}
	payload := pattern(4096, 1)
	buf := make([]byte, 0, 8192)
	ps := HostPseudo(srcAddr, dstAddr)
	b.SetBytes(4096)
	b.ReportAllocs()
	for b.Loop() {
		buf = Append(buf[:0], &h, payload, ps)
	}
}

func BenchmarkParseVerify4K(b *testing.B) {
	h := Header{BTH: BTH{Opcode: WriteMiddle, PKey: DefaultPKey, DestQP: 1}}
	ps := HostPseudo(srcAddr, dstAddr)
	buf := Append(nil, &h, pattern(4096, 1), ps)
	b.SetBytes(4096)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(buf); err != nil || !VerifyICRC(ps, buf) {
			b.Fatal("bad")
		}
	}
}

// TestAppendParts: a packet built in parts — AppendHeader, the payload
// elsewhere, AppendTrailer — is byte for byte the packet Append builds, for
// every opcode with and without payload and every pad.
func TestAppendParts(t *testing.T) {
	ps := HostPseudo(srcAddr, dstAddr)
	for op := range 256 {
		o := Opcode(op)
		if !o.Supported() {
			continue
		}
		sizes := []int{0}
		if o.HasPayload() {
			sizes = []int{0, 1, 2, 3, 4, 255, 1023, 1024, 4093, 4096}
		}
		for _, n := range sizes {
			h := Header{BTH: BTH{Opcode: o, PKey: DefaultPKey, DestQP: 0x123456, PSN: 0xfffffe, AckReq: n%2 == 1, FECN: true},
				RETH: RETH{VA: 0x1122334455667788, RKey: 0x99aabbcc, Length: uint32(n)}, AETH: AETH{Syndrome: ACKSyndrome(5), MSN: 77}, Imm: 0xdeadbeef}
			payload := pattern(n, byte(op))
			want := Append([]byte("prefix"), &h, payload, ps)[len("prefix"):]
			hdr := AppendHeader(nil, &h, n)
			trailer := AppendTrailer([]byte("x"), ps, hdr, payload)[1:]
			got := append(append(append([]byte{}, hdr...), payload...), trailer...)
			if !bytes.Equal(got, want) {
				t.Fatalf("%v, %d bytes: parts\n%x\nAppend\n%x", o, n, got, want)
			}
			if !VerifyICRC(ps, got) {
				t.Fatalf("%v, %d bytes: the ICRC does not verify", o, n)
			}
		}
	}
}

// refICRC is the ICRC as annex A17.3.3 defines it, built the long way:
// the whole masked pseudo-packet in one buffer, then crc32.ChecksumIEEE.
func refICRC(ps Pseudo, ib []byte) uint32 {
	udpLen := frame.UDPLen + len(ib) + ICRCLen
	b := bytes.Repeat([]byte{0xff}, 8) // the LRH stand-in
	ip := make([]byte, frame.IPv4Len)
	ip[0], ip[1] = 0x45, 0xff
	binary.BigEndian.PutUint16(ip[2:], uint16(frame.IPv4Len+udpLen))
	binary.BigEndian.PutUint16(ip[4:], ps.ID)
	binary.BigEndian.PutUint16(ip[6:], ps.FlagsOff)
	ip[8], ip[9], ip[10], ip[11] = 0xff, frame.ProtoUDP, 0xff, 0xff
	s, d := ps.Src.Addr().As4(), ps.Dst.Addr().As4()
	copy(ip[12:], s[:])
	copy(ip[16:], d[:])
	u := make([]byte, frame.UDPLen)
	binary.BigEndian.PutUint16(u, ps.Src.Port())
	binary.BigEndian.PutUint16(u[2:], ps.Dst.Port())
	binary.BigEndian.PutUint16(u[4:], uint16(udpLen))
	u[6], u[7] = 0xff, 0xff
	bth := bytes.Clone(ib[:BTHLen])
	bth[4] = 0xff
	b = append(append(append(append(b, ip...), u...), bth...), ib[BTHLen:]...)
	return crc32.ChecksumIEEE(b)
}

// TestPseudoCRC: the ICRC from a PseudoCRC (the headers' CRC made once,
// the lengths added from tables) is the ICRC built the long way, for
// random endpoints, identifications and flags, and lengths of every byte
// value in both length fields.
func TestPseudoCRC(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	ib := make([]byte, 70000)
	for i := range ib {
		ib[i] = byte(r.Uint32())
	}
	addr := func() netip.AddrPort {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte{byte(r.Uint32()), byte(r.Uint32()), byte(r.Uint32()), byte(r.Uint32())}), uint16(r.Uint32()))
	}
	lengths := []int{BTHLen, BTHLen + 1, BTHLen + 4, BTHLen + 16 + 4096, 65535 - 28 - 4, 65535 - 8 - 4, 65535, 69000}
	for range 300 {
		lengths = append(lengths, BTHLen+r.IntN(9000))
	}
	for i, n := range lengths {
		ps := Pseudo{Src: addr(), Dst: addr(), ID: uint16(r.Uint32()), FlagsOff: uint16(r.Uint32())}
		if i%2 == 0 {
			ps = HostPseudo(srcAddr, dstAddr)
		}
		c := NewPseudoCRC(ps)
		p := ib[:n]
		if got, want := c.ICRC(p), refICRC(ps, p); got != want || ICRC(ps, p) != want {
			t.Fatalf("%v, %d bytes: %#08x (ICRC %#08x), want %#08x", ps, n, got, ICRC(ps, p), want)
		}
	}
}
