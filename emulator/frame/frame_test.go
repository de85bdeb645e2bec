package frame

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

func sampleUDP() UDP {
	return UDP{
		SrcMAC: MAC{2, 0, 0, 0, 0, 1},
		DstMAC: MAC{2, 0, 0, 0, 0, 2},
		Src:    netip.MustParseAddrPort("10.0.0.1:4000"),
		Dst:    netip.MustParseAddrPort("10.0.1.7:9000"),
		TOS:    0x20,
	}
}

func TestAppendParseRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, 256, 1458, 9000} {
		payload := bytes.Repeat([]byte{0xab}, n)
		f := AppendUDP(nil, sampleUDP(), payload)
		if len(f) != HeaderLen+n {
			t.Fatalf("len = %d, want %d", len(f), HeaderLen+n)
		}
		h, p, err := ParseUDP(f)
		if err != nil {
			t.Fatal(err)
		}
		want := sampleUDP()
		want.TTL = DefaultTTL
		if h != want || !bytes.Equal(p, payload) {
			t.Fatalf("parsed %+v / %d bytes, want %+v / %d bytes", h, len(p), want, n)
		}
	}
}

// TestGopacketAgrees decodes our frames with gopacket: an independent check of
// the layout and of the IPv4 checksum.
func TestGopacketAgrees(t *testing.T) {
	f := AppendUDP(nil, sampleUDP(), []byte("hello"))
	pkt := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default)
	if el := pkt.ErrorLayer(); el != nil {
		t.Fatal(el.Error())
	}
	ip := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	udp := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
	if ip.SrcIP.String() != "10.0.0.1" || ip.DstIP.String() != "10.0.1.7" || udp.SrcPort != 4000 || udp.DstPort != 9000 {
		t.Fatalf("gopacket read %v -> %v ports %d -> %d", ip.SrcIP, ip.DstIP, udp.SrcPort, udp.DstPort)
	}
	if string(udp.Payload) != "hello" {
		t.Fatalf("payload %q", udp.Payload)
	}
	if Checksum(f[EthLen:EthLen+IPv4Len]) != 0 {
		t.Fatal("IPv4 header checksum does not verify")
	}
}

func TestDecTTLKeepsChecksum(t *testing.T) {
	for ttl := 255; ttl >= 0; ttl-- {
		h := sampleUDP()
		h.TTL = uint8(ttl)
		f := AppendUDP(nil, h, nil)
		if ttl == 0 { // AppendUDP reads 0 as DefaultTTL: set it by hand
			f[offTTL] = 0
			binary.BigEndian.PutUint16(f[offIPCsum:], 0)
			binary.BigEndian.PutUint16(f[offIPCsum:], Checksum(f[EthLen:EthLen+IPv4Len]))
		}
		ok := DecTTL(f)
		if ok != (ttl > 1) {
			t.Fatalf("ttl %d: DecTTL = %v", ttl, ok)
		}
		if Checksum(f[EthLen:EthLen+IPv4Len]) != 0 {
			t.Fatalf("ttl %d: checksum broken after DecTTL", ttl)
		}
	}
}

// TestDecTTLRecomputes: a frame whose header checksum is wrong when it
// arrives leaves with the right one, as P4's update_checksum writes it.
func TestDecTTLRecomputes(t *testing.T) {
	for _, bad := range []uint16{0, 0xffff, 0x1234} {
		f := AppendUDP(nil, sampleUDP(), []byte("data"))
		binary.BigEndian.PutUint16(f[offIPCsum:], bad)
		if !DecTTL(f) {
			t.Fatal("DecTTL refused a TTL of 64")
		}
		if Checksum(f[EthLen:EthLen+IPv4Len]) != 0 {
			t.Errorf("checksum %#04x in: %#04x out, which does not verify", bad, binary.BigEndian.Uint16(f[offIPCsum:]))
		}
	}
}

// TestHeaderChecksum: the word-at-a-time sum DecTTL uses is Checksum of
// the header with its checksum field zero, on random headers of every
// IPv4 length, zeros and all ones included.
func TestHeaderChecksum(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 100000 {
		h := make([]byte, 4*(5+i%11))
		switch i % 50 {
		case 0: // zeros
		case 1:
			for j := range h {
				h[j] = 0xff
			}
		default:
			for j := range h {
				h[j] = byte(r.Uint32())
			}
		}
		zeroed := bytes.Clone(h)
		zeroed[10], zeroed[11] = 0, 0
		if got, want := headerChecksum(h, binary.BigEndian.Uint32(h[8:])&0xffff0000), Checksum(zeroed); got != want {
			t.Fatalf("%x: %#04x, Checksum %#04x", h, got, want)
		}
	}
}

// BenchmarkDecTTL is the IPv4 work of every frame a switch forwards.
func BenchmarkDecTTL(b *testing.B) {
	f := AppendUDP(nil, sampleUDP(), make([]byte, 64))
	w := binary.BigEndian.Uint32(f[offTTL:]) // TTL, protocol, checksum
	for b.Loop() {
		binary.BigEndian.PutUint32(f[offTTL:], w) // as a frame arrives: whole
		DecTTL(f)
	}
}

func TestParseRejects(t *testing.T) {
	good := AppendUDP(nil, sampleUDP(), []byte("data"))
	mut := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	tests := map[string][]byte{
		"empty":        nil,
		"short":        good[:20],
		"arp":          mut(func(b []byte) []byte { b[12], b[13] = 0x08, 0x06; return b }),
		"ipv6 version": mut(func(b []byte) []byte { b[14] = 0x65; return b }),
		"tcp":          mut(func(b []byte) []byte { b[offProto] = 6; return b }),
		"fragment":     mut(func(b []byte) []byte { binary.BigEndian.PutUint16(b[offIP+6:], 0x2000); return b }),
		"total>len":    mut(func(b []byte) []byte { binary.BigEndian.PutUint16(b[offTotalLen:], 1000); return b }),
		"udp len big":  mut(func(b []byte) []byte { binary.BigEndian.PutUint16(b[offUDP+4:], 500); return b }),
		"udp len tiny": mut(func(b []byte) []byte { binary.BigEndian.PutUint16(b[offUDP+4:], 3); return b }),
		"ihl small":    mut(func(b []byte) []byte { b[14] = 0x44; return b }),
	}
	for name, f := range tests {
		if _, _, err := ParseUDP(f); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestFlowHashStable(t *testing.T) {
	a := AppendUDP(nil, sampleUDP(), []byte("x"))
	b := AppendUDP(nil, sampleUDP(), []byte("a different payload"))
	if FlowHash(a) != FlowHash(b) {
		t.Fatal("same 5-tuple, different hash")
	}
	h := sampleUDP()
	h.Src = netip.MustParseAddrPort("10.0.0.1:4001")
	if FlowHash(AppendUDP(nil, h, nil)) == FlowHash(a) {
		t.Fatal("source port does not change the hash")
	}
}

// TestFlowHashIsTupleHash: the hash of a frame is the hash of its tuple,
// for UDP, TCP and other protocols.
func TestFlowHashIsTupleHash(t *testing.T) {
	h := sampleUDP()
	f := AppendUDP(nil, h, []byte("x"))
	for _, proto := range []uint8{ProtoUDP, 6, 1} {
		f[offProto] = proto
		if got, want := FlowHash(f), TupleHash(h.Src.Addr(), h.Dst.Addr(), proto, h.Src.Port(), h.Dst.Port()); got != want {
			t.Errorf("protocol %d: FlowHash %#x, TupleHash %#x", proto, got, want)
		}
	}
	if TupleHash(h.Src.Addr(), h.Dst.Addr(), 1, 1, 2) != TupleHash(h.Src.Addr(), h.Dst.Addr(), 1, 3, 4) {
		t.Error("ports count for a protocol other than UDP and TCP")
	}
}

// TestUDPChecksum checks the UDP checksum against gopacket's, its
// verification, a corrupted byte anywhere in the datagram, and the 0xFFFF
// that stands for a computed 0.
func TestUDPChecksum(t *testing.T) {
	for _, n := range []int{0, 1, 2, 3, 5, 256, 1458} {
		payload := make([]byte, n)
		for i := range payload {
			payload[i] = byte(i*7 + n)
		}
		f := AppendUDP(nil, sampleUDP(), payload)
		pkt := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default)
		ip := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		udp := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
		if err := udp.SetNetworkLayerForChecksum(ip); err != nil {
			t.Fatal(err)
		}
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: true}, udp, gopacket.Payload(payload)); err != nil {
			t.Fatal(err)
		}
		if want := binary.BigEndian.Uint16(buf.Bytes()[6:]); udp.Checksum != want {
			t.Errorf("%d bytes: checksum %#04x, gopacket computes %#04x", n, udp.Checksum, want)
		}
		if present, ok := UDPChecksum(f); !present || !ok {
			t.Errorf("%d bytes: a correct checksum does not verify (present %v)", n, present)
		}
		for i := offSrcIP; i < len(f); i++ {
			if i >= offDstIP+4 && i < offUDP {
				continue // not covered: the IPv4 header after the addresses
			}
			c := bytes.Clone(f)
			c[i] ^= 0x10
			if present, ok := UDPChecksum(c); present && ok && !(i >= offUDP+4 && i < offUDP+6) {
				t.Errorf("%d bytes: a flipped bit at byte %d verifies", n, i)
			}
		}
	}
	f := AppendUDP(nil, sampleUDP(), []byte("data"))
	ClearUDPChecksum(f)
	if present, _ := UDPChecksum(f); present {
		t.Error("a zero checksum is reported present")
	}
	// A datagram whose checksum computes to 0 carries 0xFFFF, which verifies.
	for x := range 1 << 16 {
		g := AppendUDP(nil, sampleUDP(), []byte{byte(x >> 8), byte(x)})
		if binary.BigEndian.Uint16(g[offUDP+6:]) == 0xffff {
			if _, ok := UDPChecksum(g); !ok {
				t.Fatal("0xFFFF for a computed 0 does not verify")
			}
			return
		}
	}
	t.Fatal("no two-byte payload checksums to 0")
}

func FuzzParseUDP(f *testing.F) {
	f.Add(AppendUDP(nil, sampleUDP(), []byte("seed")))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, p, err := ParseUDP(b)
		if err != nil {
			return
		}
		if len(p) > len(b) || !h.Src.Addr().Is4() {
			t.Fatalf("inconsistent parse %+v, %d payload bytes of %d", h, len(p), len(b))
		}
		if IsIPv4(b) {
			_ = FlowHash(b)
			c := bytes.Clone(b)
			DecTTL(c)
			if present, ok := UDPChecksum(c); present && !ok {
				SetUDPChecksum(c)
				if _, ok := UDPChecksum(c); !ok {
					t.Fatal("SetUDPChecksum wrote a checksum that does not verify")
				}
			}
			ClearUDPChecksum(c)
		}
	})
}

// TestTemplate: a template writes the bytes AppendUDP writes, for every
// payload length (the IPv4 checksum folds differently as it grows), TOS
// and TTL, after a prefix already in the buffer.
func TestTemplate(t *testing.T) {
	for _, h := range []UDP{
		sampleUDP(),
		{SrcMAC: MAC{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, DstMAC: MAC{1}, Src: netip.MustParseAddrPort("255.255.255.254:65535"), Dst: netip.MustParseAddrPort("255.255.255.255:65535"), TOS: 0xff, TTL: 255},
		{Src: netip.MustParseAddrPort("0.0.0.0:0"), Dst: netip.MustParseAddrPort("0.0.0.0:0")},
	} {
		tpl := NewTemplate(h)
		for n := 0; n <= 9000; n += 1 + n/7 {
			payload := make([]byte, n)
			for i := range payload {
				payload[i] = byte(i * 13)
			}
			want := AppendUDP([]byte("prefix"), h, payload)
			if got := tpl.Append([]byte("prefix"), payload); !bytes.Equal(got, want) {
				t.Fatalf("%+v, %d bytes: template wrote\n%x\nAppendUDP wrote\n%x", h, n, got[:6+HeaderLen], want[:6+HeaderLen])
			}
			// Without a checksum: the same frame with 0 in the field.
			ClearUDPChecksum(want[6:])
			got := tpl.AppendHeaders([]byte("prefix"), n)
			got = append(append(got, payload[:n/3]...), payload[n/3:]...)
			if !bytes.Equal(got, want) {
				t.Fatalf("%+v, %d bytes: template without checksum wrote\n%x\nwant\n%x", h, n, got[:6+HeaderLen], want[:6+HeaderLen])
			}
			if present, _ := UDPChecksum(got[6:]); present {
				t.Fatalf("%d bytes: AppendHeaders left a checksum", n)
			}
			if tpl.SetChecksum(got[6:]); !bytes.Equal(got, AppendUDP([]byte("prefix"), h, payload)) {
				t.Fatalf("%d bytes: SetChecksum wrote %x", n, got[6:6+HeaderLen])
			}
		}
	}
}

// TestSetChecksumParts: a checksum from a head, a body given by its Sum
// and the rest is SetChecksum's, for parts of every parity (a part at an
// odd offset adds its sum byte-swapped), on random bytes and on bytes that
// make every addition carry.
func TestSetChecksumParts(t *testing.T) {
	tpl := NewTemplate(sampleUDP())
	r := rand.New(rand.NewPCG(3, 4))
	for _, fill := range []func(int) byte{func(int) byte { return byte(r.Uint32()) }, func(int) byte { return 0xff }} {
		for _, n := range []int{0, 1, 2, 3, 7, 64, 129, 4096 + 40 + 8, 9000} {
			payload := make([]byte, n)
			for i := range payload {
				payload[i] = fill(i)
			}
			want := tpl.Append(nil, payload)
			for range 40 {
				head := r.IntN(n + 1)
				body := r.IntN(n - head + 1)
				got := tpl.AppendHeaders(nil, n)
				got = append(got, payload...)
				tpl.SetChecksumParts(got, head, body, Sum(payload[head:head+body]))
				if !bytes.Equal(got, want) {
					t.Fatalf("%d bytes, head %d, body %d: checksum %x, want %x", n, head, body, got[offUDP+6:offUDP+8], want[offUDP+6:offUDP+8])
				}
			}
		}
	}
}

// TestSum64 checks the 64-bit ones' complement sum against the sum of
// 16-bit words of RFC 1071 for every length up to 300 bytes, on random
// bytes and on bytes that make every addition carry.
func TestSum64(t *testing.T) {
	ref := func(s uint64, b []byte) uint16 {
		for i := 0; i < len(b); i += 2 {
			w := uint64(b[i]) << 8
			if i+1 < len(b) {
				w |= uint64(b[i+1])
			}
			s += w
		}
		for s>>16 != 0 {
			s = s&0xffff + s>>16
		}
		return uint16(s)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for n := range 300 {
		for _, fill := range []func() byte{func() byte { return byte(r.Uint32()) }, func() byte { return 0xff }} {
			b := make([]byte, n)
			for i := range b {
				b[i] = fill()
			}
			start := uint64(r.Uint32())
			if got, want := fold(sum64(start, b)), ref(start, b); got != want && !(got == 0xffff && want == 0 || got == 0 && want == 0xffff) {
				t.Fatalf("%d bytes %x from %#x: sum %#04x, want %#04x", n, b, start, got, want)
			}
		}
	}
}

// BenchmarkUDPChecksum verifies the UDP checksum of a 4 KiB datagram, as a
// sim host does for every datagram it receives.
func BenchmarkUDPChecksum(b *testing.B) {
	f := AppendUDP(nil, sampleUDP(), make([]byte, 4096))
	b.SetBytes(int64(len(f)))
	for b.Loop() {
		if present, ok := UDPChecksum(f); !present || !ok {
			b.Fatal("bad checksum")
		}
	}
}
