package p4rt

import (
	"fmt"
	"math/bits"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The byte-string codec of P4Runtime 1.4.1 §8.3 ("Bytestrings"): integers
// travel big-endian; a writer should send the shortest string that holds
// the value (the canonical form, at least one byte), and a receiver
// accepts any length as long as the value fits the P4Info bit width: zero
// padding for bit<W>, sign extension for int<W>. An empty string, or a
// value wider than its width, is OUT_OF_RANGE. Every function here works
// on any width (a 128-bit IPv6 address as well as a 9-bit port) and never
// panics, whatever the input.

// CanonicalBits returns the canonical form of b, a bytestring for a
// bit<width> value: leading zero bytes removed, a single zero byte for 0.
// It fails with OUT_OF_RANGE when b is empty or its value needs more than
// width bits. The result does not alias b.
func CanonicalBits(b []byte, width int) ([]byte, error) {
	if len(b) == 0 {
		return nil, status.Error(codes.OutOfRange, "empty bytestring")
	}
	i := 0
	for i < len(b)-1 && b[i] == 0 {
		i++
	}
	v := b[i:]
	if n := bitLen(v); n > width {
		return nil, status.Errorf(codes.OutOfRange, "value 0x%x needs %d bits; the field has %d", v, n, width)
	}
	return append([]byte(nil), v...), nil
}

// bitLen is the number of significant bits of a big-endian unsigned
// bytestring with no leading zero byte (or a single byte).
func bitLen(v []byte) int {
	if len(v) == 0 {
		return 0
	}
	return (len(v)-1)*8 + bits.Len8(v[0])
}

// CanonicalInt returns the canonical form of b, a two's complement
// bytestring for an int<width> value: redundant sign-extension bytes
// removed. It fails with OUT_OF_RANGE when b is empty or its value does not
// fit in width bits.
func CanonicalInt(b []byte, width int) ([]byte, error) {
	if len(b) == 0 {
		return nil, status.Error(codes.OutOfRange, "empty bytestring")
	}
	i := 0
	for i < len(b)-1 && (b[i] == 0 && b[i+1]&0x80 == 0 || b[i] == 0xff && b[i+1]&0x80 != 0) {
		i++
	}
	v := b[i:]
	// Bits needed in two's complement: the magnitude bits plus a sign bit.
	n := 1
	if v[0]&0x80 == 0 {
		n += bitLen(v)
	} else {
		// Negative: count the bits after the leading ones.
		lead := bits.LeadingZeros8(^v[0])
		n += (len(v)-1)*8 + 8 - lead
	}
	if isZero(v) {
		n = 1
	}
	if n > width {
		return nil, status.Errorf(codes.OutOfRange, "signed value 0x%x needs %d bits; the field has %d", v, n, width)
	}
	return append([]byte(nil), v...), nil
}

func isZero(v []byte) bool {
	for _, c := range v {
		if c != 0 {
			return false
		}
	}
	return true
}

// EncodeUint returns v in P4Runtime's canonical binary form: big-endian
// with no leading zero bytes, and a single zero byte for 0.
func EncodeUint(v uint64) []byte {
	n := max(1, (bits.Len64(v)+7)/8)
	b := make([]byte, n)
	for i := n - 1; i >= 0; i-- {
		b[i] = byte(v)
		v >>= 8
	}
	return b
}

// EncodeInt returns v as a canonical two's complement bytestring.
func EncodeInt(v int64) []byte {
	b := []byte{byte(v >> 56), byte(v >> 48), byte(v >> 40), byte(v >> 32), byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}
	c, _ := CanonicalInt(b, 64) // always fits
	return c
}

// DecodeUint decodes a big-endian P4Runtime bytestring of a bit<width>
// field (width 1 to 64; 0 means 64). Leading zero bytes are accepted, of
// any number; an empty string or a value wider than width fails with
// OUT_OF_RANGE.
func DecodeUint(b []byte, width int) (uint64, error) {
	if width <= 0 || width > 64 {
		width = 64
	}
	c, err := CanonicalBits(b, width)
	if err != nil {
		return 0, err
	}
	var v uint64
	for _, x := range c {
		v = v<<8 | uint64(x)
	}
	return v, nil
}

// DecodeInt decodes a two's complement P4Runtime bytestring of an
// int<width> field (width 1 to 64; 0 means 64), with the same rules as
// DecodeUint for sign extension.
func DecodeInt(b []byte, width int) (int64, error) {
	if width <= 0 || width > 64 {
		width = 64
	}
	c, err := CanonicalInt(b, width)
	if err != nil {
		return 0, err
	}
	var v int64
	if c[0]&0x80 != 0 {
		v = -1
	}
	for _, x := range c {
		v = v<<8 | int64(x)
	}
	return v, nil
}

// fitUint checks that v fits in width bits (1 to 64).
func fitUint(v uint64, width int) error {
	if width <= 0 || width > 64 {
		return fmt.Errorf("bit width %d; only 1 to 64 bits are supported", width)
	}
	if width < 64 && v>>uint(width) != 0 {
		return fmt.Errorf("%d does not fit in %d bits", v, width)
	}
	return nil
}
