package p4rt

import (
	"bytes"
	"testing"
	"time"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
)

func toyPacketIO(t testing.TB) *PacketIO {
	t.Helper()
	info := &p4configv1.P4Info{}
	if err := prototext.Unmarshal([]byte(toyInfo), info); err != nil {
		t.Fatal(err)
	}
	return NewPacketIO(info)
}

func md(id uint32, v ...byte) *p4v1.PacketMetadata {
	return &p4v1.PacketMetadata{MetadataId: id, Value: v}
}

// TestPacketIO: the controller headers are packed most significant bit
// first, fields in P4Info order (packet_out: port 9 bits, flag 1, pad 6).
func TestPacketIO(t *testing.T) {
	p := toyPacketIO(t)
	f, err := p.OutFrame(&p4v1.PacketOut{Payload: []byte("abc"), Metadata: []*p4v1.PacketMetadata{md(2, 1), md(1, 0, 1, 0x05), md(3, 0)}})
	if err != nil {
		t.Fatal(err)
	}
	// port 0x105 = 1 0000 0101, flag 1, pad 000000 → 1000 0010 1100 0000.
	if want := []byte{0x82, 0xc0, 'a', 'b', 'c'}; !bytes.Equal(f, want) {
		t.Fatalf("frame %x, want %x", f, want)
	}
	for _, tt := range []struct {
		name string
		mds  []*p4v1.PacketMetadata
		code codes.Code
	}{
		{"missing field", []*p4v1.PacketMetadata{md(1, 1), md(2, 0)}, codes.InvalidArgument},
		{"field twice", []*p4v1.PacketMetadata{md(1, 1), md(1, 1), md(2, 0), md(3, 0)}, codes.InvalidArgument},
		{"unknown field", []*p4v1.PacketMetadata{md(1, 1), md(2, 0), md(3, 0), md(7, 0)}, codes.InvalidArgument},
		{"too wide", []*p4v1.PacketMetadata{md(1, 2, 0), md(2, 0), md(3, 0)}, codes.OutOfRange},
		{"empty value", []*p4v1.PacketMetadata{md(1), md(2, 0), md(3, 0)}, codes.OutOfRange},
	} {
		if _, err := p.OutFrame(&p4v1.PacketOut{Metadata: tt.mds}); status.Code(err) != tt.code {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.code)
		}
	}
	// packet_in: port 9 bits, pad 7.
	pi, err := p.PacketIn([]byte{0x82, 0x80, 'x'})
	if err != nil {
		t.Fatal(err)
	}
	if string(pi.GetPayload()) != "x" || p4Uint(pi.GetMetadata()[0]) != 0x105 || p4Uint(pi.GetMetadata()[1]) != 0 {
		t.Errorf("packet-in %v", pi)
	}
	if _, err := p.PacketIn([]byte{1}); err == nil {
		t.Error("a frame shorter than the header was accepted")
	}
	bare := NewPacketIO(&p4configv1.P4Info{})
	if f, err := bare.OutFrame(&p4v1.PacketOut{Payload: []byte("z")}); err != nil || string(f) != "z" {
		t.Errorf("bare packet-out: %q, %v", f, err)
	}
}

func p4Uint(m *p4v1.PacketMetadata) uint64 { return Uint(m.GetValue()) }

// FuzzPacketIO: any packet-out either fails with a status or gives a frame
// whose header decodes (as a packet-in of the same layout) to the same
// values; any frame to the CPU port decodes or fails, never panics.
func FuzzPacketIO(f *testing.F) {
	po := &p4v1.PacketOut{Payload: []byte("abc"), Metadata: []*p4v1.PacketMetadata{md(1, 1, 5), md(2, 1), md(3, 0)}}
	b, _ := proto.Marshal(po)
	f.Add(b)
	p := toyPacketIO(f)
	same := &PacketIO{in: p.out, out: p.out}
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = p.PacketIn(data)
		var po p4v1.PacketOut
		if proto.Unmarshal(data, &po) != nil {
			return
		}
		frame, err := same.OutFrame(&po)
		if err != nil {
			return
		}
		pi, err := same.PacketIn(frame)
		if err != nil {
			t.Fatalf("own frame %x: %v", frame, err)
		}
		if !bytes.Equal(pi.GetPayload(), po.GetPayload()) {
			t.Fatalf("payload %x, want %x", pi.GetPayload(), po.GetPayload())
		}
		for _, m := range po.GetMetadata() {
			v, _ := CanonicalBits(m.GetValue(), 64)
			for _, got := range pi.GetMetadata() {
				if got.GetMetadataId() == m.GetMetadataId() && !bytes.Equal(got.GetValue(), v) {
					t.Fatalf("metadata %d: %x, want %x", m.GetMetadataId(), got.GetValue(), v)
				}
			}
		}
	})
}

func TestDigestQueue(t *testing.T) {
	q := NewDigestQueue()
	t0 := time.Unix(1000, 0)
	cfg := &p4v1.DigestEntry_Config{MaxTimeoutNs: int64(time.Millisecond), MaxListSize: 2, AckTimeoutNs: int64(10 * time.Millisecond)}
	d := func(b byte) *p4v1.P4Data { return &p4v1.P4Data{Data: &p4v1.P4Data_Bitstring{Bitstring: []byte{b}}} }
	if l := q.Add(t0, 1, cfg, d(1)); l != nil {
		t.Fatalf("a list of one before the timeout: %v", l)
	}
	if l := q.Add(t0, 1, cfg, d(1)); l != nil {
		t.Fatal("a duplicate was buffered")
	}
	ls := q.Add(t0, 1, cfg, d(2))
	if len(ls) != 1 || len(ls[0].GetData()) != 2 || ls[0].GetListId() != 1 {
		t.Fatalf("max_list_size 2: %v", ls)
	}
	// Sent and not acknowledged: duplicates are dropped.
	if l := q.Add(t0, 1, cfg, d(2)); l != nil {
		t.Fatal("a message of an unacknowledged list was buffered again")
	}
	q.Add(t0, 1, cfg, d(3))
	if at, ok := q.Next(); !ok || !at.Equal(t0.Add(time.Millisecond)) {
		t.Fatalf("next deadline %v %v", at, ok)
	}
	if ls := q.Tick(t0.Add(time.Millisecond)); len(ls) != 1 || len(ls[0].GetData()) != 1 {
		t.Fatalf("max_timeout: %v", ls)
	}
	if !q.Ack(1, 1) || q.Ack(1, 1) {
		t.Fatal("ack of list 1")
	}
	if l := q.Add(t0, 1, cfg, d(2)); l != nil || len(q.bufs[1].data) != 1 {
		t.Fatal("an acknowledged message is not buffered again")
	}
	// Acknowledgements time out.
	if ls := q.Tick(t0.Add(time.Second)); len(ls) != 1 || ls[0].GetListId() != 3 {
		t.Fatalf("the buffered message: %v", ls)
	}
	q.Tick(t0.Add(2 * time.Second))
	if len(q.sent) != 0 || len(q.known) != 0 {
		t.Fatalf("after the ack timeout: sent %v known %v", q.sent, q.known)
	}
	// max_timeout 0: every message at once; ack_timeout 0: no cache.
	now := &p4v1.DigestEntry_Config{}
	if ls := q.Add(t0, 2, now, d(9)); len(ls) != 1 {
		t.Fatal("max_timeout 0 buffered a message")
	}
	if ls := q.Add(t0, 2, now, d(9)); len(ls) != 1 {
		t.Fatal("ack_timeout 0 kept a cache")
	}
}
