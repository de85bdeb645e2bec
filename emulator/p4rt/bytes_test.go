package p4rt

import (
	"bytes"
	"math"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The examples of P4Runtime 1.4.1 §8.3, tables "Examples of Valid
// Bytestring Encoding" and "Examples of Invalid Bytestring Encoding".
func TestBytestringSpecExamples(t *testing.T) {
	valid := []struct {
		signed    bool
		width     int
		in, canon string
	}{
		{false, 8, "\x63", "\x63"},
		{false, 16, "\x00\x63", "\x63"},
		{false, 16, "\x63", "\x63"},
		{false, 16, "\x30\x64", "\x30\x64"},
		{false, 16, "\x00\x30\x64", "\x30\x64"},
		{false, 12, "\x00\x63", "\x63"},
		{false, 12, "\x63", "\x63"},
		{false, 12, "\x00\x00\x63", "\x63"},
		{true, 8, "\x63", "\x63"},
		{true, 8, "\x9d", "\x9d"},
		{true, 8, "\xff\x9d", "\x9d"},
		{true, 12, "\xfd\x1d", "\xfd\x1d"},
		{true, 16, "\x00\x00", "\x00"},
		{true, 16, "\x00", "\x00"},
	}
	for _, v := range valid {
		f := CanonicalBits
		if v.signed {
			f = CanonicalInt
		}
		got, err := f([]byte(v.in), v.width)
		if err != nil || string(got) != v.canon {
			t.Errorf("signed %v width %d %q: %q, %v; want %q", v.signed, v.width, v.in, got, err, v.canon)
		}
	}
	invalid := []struct {
		signed bool
		width  int
		in     string
	}{
		{false, 8, "\x01\x63"},
		{false, 8, ""},
		{false, 16, "\x01\x00\x63"},
		{false, 12, "\x10\x63"},
		{false, 12, "\x01\x00\x63"},
		{false, 12, "\x00\x40\x63"},
		{true, 8, "\x00\x9d"},
		{true, 12, "\x8d\x1d"},
		{true, 16, ""},
	}
	for _, v := range invalid {
		f := CanonicalBits
		if v.signed {
			f = CanonicalInt
		}
		if _, err := f([]byte(v.in), v.width); status.Code(err) != codes.OutOfRange {
			t.Errorf("signed %v width %d %q: %v, want OUT_OF_RANGE", v.signed, v.width, v.in, err)
		}
	}
}

func TestIntRoundTrip(t *testing.T) {
	for _, v := range []int64{0, 1, -1, 127, -128, 128, -129, math.MaxInt64, math.MinInt64, -99} {
		got, err := DecodeInt(EncodeInt(v), 64)
		if err != nil || got != v {
			t.Errorf("%d → %x → %d, %v", v, EncodeInt(v), got, err)
		}
	}
	if _, err := DecodeInt(EncodeInt(-129), 8); status.Code(err) != codes.OutOfRange {
		t.Errorf("-129 in int<8>: %v", err)
	}
	if v, err := DecodeUint([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff}, 8); err != nil || v != 255 {
		t.Errorf("padded 255: %d, %v", v, err)
	}
}

// FuzzBytestring checks the codec's properties on any input: it never
// panics; an accepted string's canonical form has no redundant leading
// byte, fits the width, is its own canonical form, and decodes to the
// same value as the input.
func FuzzBytestring(f *testing.F) {
	f.Add([]byte{0, 0x63}, uint8(12), false)
	f.Add([]byte{0xff, 0x9d}, uint8(8), true)
	f.Add([]byte{}, uint8(1), false)
	f.Fuzz(func(t *testing.T, b []byte, w uint8, signed bool) {
		width := int(w)%130 + 1
		canon := CanonicalBits
		if signed {
			canon = CanonicalInt
		}
		c, err := canon(b, width)
		if err != nil {
			if status.Code(err) != codes.OutOfRange {
				t.Fatalf("error %v is not OUT_OF_RANGE", err)
			}
			return
		}
		if len(c) == 0 || len(c) > len(b) {
			t.Fatalf("%x → canonical %x", b, c)
		}
		if !signed && len(c) > 1 && c[0] == 0 {
			t.Fatalf("canonical %x has a leading zero byte", c)
		}
		if signed && len(c) > 1 && (c[0] == 0 && c[1]&0x80 == 0 || c[0] == 0xff && c[1]&0x80 != 0) {
			t.Fatalf("canonical %x has a redundant sign byte", c)
		}
		c2, err := canon(c, width)
		if err != nil || !bytes.Equal(c, c2) {
			t.Fatalf("canonical %x is not a fixed point: %x, %v", c, c2, err)
		}
		if !signed && width <= 64 {
			v1, e1 := DecodeUint(b, width)
			v2, e2 := DecodeUint(c, width)
			if e1 != nil || e2 != nil || v1 != v2 || !bytes.Equal(EncodeUint(v1), c) {
				t.Fatalf("%x and %x decode to %d and %d (%v %v)", b, c, v1, v2, e1, e2)
			}
		}
		if signed && width <= 64 {
			v1, e1 := DecodeInt(b, width)
			v2, e2 := DecodeInt(c, width)
			if e1 != nil || e2 != nil || v1 != v2 || !bytes.Equal(EncodeInt(v1), c) {
				t.Fatalf("%x and %x decode to %d and %d (%v %v)", b, c, v1, v2, e1, e2)
			}
		}
	})
}
