package ina

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// TestReaddressMatchesSetIP: a multicast copy readdressed by patching the
// first copy's checksums is byte for byte the frame setIP makes by summing
// it again, for random payloads and destinations (the UDP checksum's
// all-ones case included: payloads are tuned until the first copy's UDP
// checksum sums to zero).
func TestReaddressMatchesSetIP(t *testing.T) {
	r := newRig(t, DefaultK, 64)
	rng := rand.New(rand.NewPCG(1, 2))
	self := [4]byte{10, 0, 0, 254}
	zeroSeen := false
	for i := range 20000 {
		vals := make([]int32, DefaultK)
		for j := range vals {
			vals[j] = rng.Int32()
		}
		f := r.data(1, 0, 4, uint16(rng.IntN(512)), 0, 0, rng.Uint32(), 0, vals)
		dst0 := [4]byte{10, byte(rng.IntN(256)), byte(rng.IntN(256)), byte(rng.IntN(256))}
		dport0 := uint16(rng.IntN(65536))
		first := bytes.Clone(f)
		setIP(first, self, dst0, Port, dport0)
		if i%2 == 1 {
			// Make the first copy's datagram sum to zero (its checksum
			// sent as all ones): add its checksum, the complement of the
			// sum, to the last 16-bit word of the values.
			c := binary.BigEndian.Uint16(first[offUDPCsum:])
			w := uint32(binary.BigEndian.Uint16(f[len(f)-2:])) + uint32(c)
			binary.BigEndian.PutUint16(f[len(f)-2:], uint16(w&0xffff+w>>16))
			first = bytes.Clone(f)
			setIP(first, self, dst0, Port, dport0)
			if got := binary.BigEndian.Uint16(first[offUDPCsum:]); got != 0xffff {
				t.Fatalf("case %d: the tuned first copy's UDP checksum is %#04x, want 0xffff", i, got)
			}
			zeroSeen = true
		}
		a := addressingOf(first)
		for range 3 {
			dst := [4]byte{byte(rng.IntN(256)), byte(rng.IntN(256)), byte(rng.IntN(256)), byte(rng.IntN(256))}
			dport := uint16(rng.IntN(65536))
			want := bytes.Clone(f)
			setIP(want, self, dst, Port, dport)
			got := bytes.Clone(f)
			a.readdress(got, self, dst, Port, dport)
			if !bytes.Equal(got, want) {
				t.Fatalf("case %d: readdressed to %v:%d differs from setIP's frame\n got %x\nwant %x", i, dst, dport, got[:offINA], want[:offINA])
			}
		}
	}
	if !zeroSeen {
		t.Error("no first copy had an all-ones UDP checksum: the edge case went untested")
	}
}
