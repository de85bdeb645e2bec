package ieeecrc

import (
	"hash/crc32"
	"math/bits"
	"math/rand/v2"
	"testing"
)

// TestUpdate compares Update with hash/crc32 on random buffers of every
// length around the fold's thresholds and steps, at every alignment and
// from random initial values.
func TestUpdate(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 3*minFold+300)
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	check := func(c uint32, p []byte) {
		t.Helper()
		if got, want := Update(c, p), crc32.Update(c, crc32.IEEETable, p); got != want {
			t.Fatalf("%d bytes from %#08x: %#08x, want %#08x", len(p), c, got, want)
		}
	}
	for n := 0; n <= len(buf)-64; n++ {
		off := n % 64
		c := r.Uint32()
		check(c, buf[off:off+n])
		if n < 300 {
			if got, want := UpdateShort(c, buf[off:off+n]), crc32.Update(c, crc32.IEEETable, buf[off:off+n]); got != want {
				t.Fatalf("UpdateShort, %d bytes from %#08x: %#08x, want %#08x", n, c, got, want)
			}
		}
	}
	for _, b := range []byte{0, 0xff} { // every bit set, none set
		p := make([]byte, 4096+28)
		for i := range p {
			p[i] = b
		}
		check(0, p)
		check(0xffffffff, p)
	}
	// The checksum of a whole buffer, as crc32.ChecksumIEEE gives it.
	if got, want := Update(0, buf), crc32.ChecksumIEEE(buf); got != want {
		t.Fatalf("checksum %#08x, want %#08x", got, want)
	}
}

// TestConstants recomputes the folding constants of fold_amd64.s.
func TestConstants(t *testing.T) {
	xpow := func(e int) uint32 { // x^e mod P, P = x^32 + 0x04C11DB7
		r := uint32(1)
		for range e {
			hi := r >> 31
			r <<= 1
			if hi != 0 {
				r ^= 0x04C11DB7
			}
		}
		return r
	}
	k := func(e int) uint64 { return uint64(bits.Reverse32(xpow(e))) << 1 }
	for _, c := range []struct {
		d      int
		lo, hi uint64
	}{
		{2048, 0x11542778a, 0x1322d1430},
		{512, 0x154442bd4, 0x1c6e41596},
		{128, 0x1751997d0, 0xccaa009e},
	} {
		if k(c.d+32) != c.lo || k(c.d-32) != c.hi {
			t.Errorf("D=%d: constants %#x, %#x; the assembly has %#x, %#x", c.d, k(c.d+32), k(c.d-32), c.lo, c.hi)
		}
	}
	if k(64) != 0x163cd6124 {
		t.Errorf("x^64 mod P: %#x; the assembly has 0x163cd6124", k(64))
	}
	// Barrett: P and mu = floor(x^64 / P), 33 bits each, reflected. The
	// long division brings down x^64's 65 bits from the top.
	const p = 1<<32 | 0x04C11DB7
	var mu, rem uint64
	for i := 64; i >= 0; i-- {
		rem <<= 1
		if i == 64 {
			rem |= 1
		}
		mu <<= 1
		if rem>>32&1 == 1 {
			rem ^= p
			mu |= 1
		}
	}
	rev33 := func(v uint64) uint64 { return bits.Reverse64(v) >> 31 }
	if rev33(p) != 0x1db710641 || rev33(mu) != 0x1f7011641 {
		t.Errorf("Barrett constants %#x, %#x; the assembly has 0x1db710641, 0x1f7011641", rev33(p), rev33(mu))
	}
}

// FuzzUpdate: Update agrees with hash/crc32 on any input.
func FuzzUpdate(f *testing.F) {
	f.Add(uint32(0), make([]byte, 4096))
	f.Add(uint32(0xdeadbeef), make([]byte, 1500))
	f.Fuzz(func(t *testing.T, c uint32, p []byte) {
		want := crc32.Update(c, crc32.IEEETable, p)
		if got := Update(c, p); got != want {
			t.Fatalf("%d bytes from %#08x: %#08x, want %#08x", len(p), c, got, want)
		}
		if got := UpdateShort(c, p); got != want {
			t.Fatalf("UpdateShort, %d bytes from %#08x: %#08x, want %#08x", len(p), c, got, want)
		}
	})
}

// BenchmarkUpdate compares Update with hash/crc32 on a RoCE packet's
// bytes after its BTH (4 KiB of payload and an RETH).
func BenchmarkUpdate(b *testing.B) {
	p := make([]byte, 4096+16)
	b.Run("ieeecrc", func(b *testing.B) {
		b.SetBytes(int64(len(p)))
		var c uint32
		for b.Loop() {
			c = Update(c, p)
		}
	})
	b.Run("hash-crc32", func(b *testing.B) {
		b.SetBytes(int64(len(p)))
		var c uint32
		for b.Loop() {
			c = crc32.Update(c, crc32.IEEETable, p)
		}
	})
}
