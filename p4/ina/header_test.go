package ina

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestHeaderRoundTrip(t *testing.T) {
	h := Header{Flags: FlagData | FlagRetransmit, Job: 1023, Slot: 65535, Ver: 1, Worker: 31, Workers: 32,
		Round: 0xdeadbeef, Offset: 0x01020304, Bitmap: 1 << 31}
	vals := []int32{0, -1, 1 << 30, -1 << 31, 42}
	b := Append([]byte{0xee}, h, vals)[1:]
	if len(b) != HeaderLen+4*len(vals) {
		t.Fatalf("length %d", len(b))
	}
	got, v, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	h.K = uint16(len(vals))
	if got != h {
		t.Errorf("header %+v, want %+v", got, h)
	}
	dec := make([]int32, len(vals))
	GetValues(dec, v)
	if !slices.Equal(dec, vals) {
		t.Errorf("values %v, want %v", dec, vals)
	}
	// The documented layout, byte by byte.
	want := []byte{1, 0x05, 0x03, 0xff, 0xff, 0xff, 1, 31, 32, 0, 0, 5, 0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 0x80, 0, 0, 0}
	if !slices.Equal(b[:HeaderLen], want) {
		t.Errorf("layout\n got %x\nwant %x", b[:HeaderLen], want)
	}
}

func TestParseRejects(t *testing.T) {
	good := func() Header {
		return Header{Flags: FlagData, Job: 1, Worker: 1, Workers: 3, Bitmap: 2}
	}
	tests := []struct {
		name string
		edit func(h *Header, b []byte) []byte
		err  string
	}{
		{"short", func(_ *Header, b []byte) []byte { return b[:HeaderLen-1] }, "header needs"},
		{"proto", func(_ *Header, b []byte) []byte { b[0] = 2; return b }, "protocol version"},
		{"unknown flag", func(_ *Header, b []byte) []byte { b[1] |= 0x80; return b }, "unknown flags"},
		{"no kind", func(_ *Header, b []byte) []byte { b[1] = FlagRetransmit; return b }, "exactly one"},
		{"two kinds", func(_ *Header, b []byte) []byte { b[1] = FlagData | FlagResult; return b }, "exactly one"},
		{"job", func(_ *Header, b []byte) []byte { b[2], b[3] = 4, 0; return b }, "job 1024"},
		{"version", func(_ *Header, b []byte) []byte { b[6] = 2; return b }, "version 2"},
		{"worker", func(_ *Header, b []byte) []byte { b[7] = 3; return b }, "worker 3 of 3"},
		{"no workers", func(_ *Header, b []byte) []byte { b[8] = 0; return b }, "0 workers"},
		{"too many workers", func(_ *Header, b []byte) []byte { b[8] = 33; return b }, "33 workers"},
		{"reserved", func(_ *Header, b []byte) []byte { b[9] = 1; return b }, "reserved"},
		{"k zero", func(_ *Header, b []byte) []byte { b[10], b[11] = 0, 0; return b }, "k = 0"},
		{"k long", func(_ *Header, b []byte) []byte { b[11] = 5; return b }, "needs"},
		{"trailing", func(_ *Header, b []byte) []byte { return append(b, 0) }, "needs"},
		{"data bitmap", func(_ *Header, b []byte) []byte { b[23] = 3; return b }, "data from worker"},
		{"result bitmap", func(_ *Header, b []byte) []byte { b[1] = FlagResult; b[23] = 3; return b }, "result bitmap"},
		{"partial bitmap", func(_ *Header, b []byte) []byte { b[1] = FlagPartial; b[23] = 8; return b }, "partial bitmap"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := good()
			b := tt.edit(&h, Append(nil, h, []int32{1, 2, 3, 4}))
			_, _, err := Parse(b)
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("error %v, want ErrMalformed containing %q", err, tt.err)
			}
		})
	}
	h := good()
	h.Flags = FlagPartial
	h.Bitmap = 5
	if _, _, err := Parse(Append(nil, h, []int32{1})); err != nil {
		t.Errorf("a valid partial was rejected: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(Append(nil, Header{Flags: FlagData, Job: 3, Worker: 0, Workers: 2, Bitmap: 1}, []int32{1, 2}))
	f.Add(Append(nil, Header{Flags: FlagResult | FlagOverflow, Workers: 4, Bitmap: 15}, make([]int32, 64)))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, vals, err := Parse(b)
		if err != nil {
			return
		}
		if err := h.Check(); err != nil {
			t.Fatalf("Parse accepted a header Check rejects: %v", err)
		}
		if len(vals) != 4*int(h.K) {
			t.Fatalf("%d value bytes for k = %d", len(vals), h.K)
		}
		v := make([]int32, h.K)
		GetValues(v, vals)
		if again := Append(nil, h, v); !slices.Equal(again, b) {
			t.Fatalf("re-encoding differs:\n%x\n%x", again, b)
		}
	})
}
