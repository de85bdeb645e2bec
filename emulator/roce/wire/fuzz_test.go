package wire

import (
	"bytes"
	"testing"
)

// FuzzParse decodes arbitrary UDP payloads: Parse never panics, and what
// it accepts encodes back (Append) to a packet that decodes to the same
// fields.
func FuzzParse(f *testing.F) {
	for _, v := range vectors() {
		f.Add(Append(nil, &v.h, v.payload, HostPseudo(srcAddr, dstAddr)))
	}
	f.Add([]byte{})
	f.Add(make([]byte, MinLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Parse(b)
		ps := HostPseudo(srcAddr, dstAddr)
		VerifyICRC(ps, b)
		if err != nil {
			return
		}
		h := Header{BTH: p.BTH, RETH: p.RETH, AETH: p.AETH, Imm: p.Imm}
		out := Append(nil, &h, p.Payload, ps)
		q, err := Parse(out)
		if err != nil {
			t.Fatalf("re-encoded packet does not parse: %v", err)
		}
		if q.BTH != p.BTH {
			t.Fatalf("BTH round trip: %+v != %+v", q.BTH, p.BTH)
		}
		if q.RETH != p.RETH && p.Opcode.HasRETH() || q.AETH != p.AETH && p.Opcode.HasAETH() || q.Imm != p.Imm && p.Opcode.HasImm() {
			t.Fatalf("extension headers differ after a round trip")
		}
		if !bytes.Equal(q.Payload, p.Payload) {
			t.Fatalf("payload differs after a round trip")
		}
		if !VerifyICRC(ps, out) {
			t.Fatalf("Append wrote a bad ICRC")
		}
	})
}

// FuzzFrameICRC computes ICRCs of arbitrary frames: never a panic, and a
// frame SetFrameICRC accepts then verifies.
func FuzzFrameICRC(f *testing.F) {
	for _, v := range vectors() {
		f.Add(frameOf(v))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ParseFrame(b)
		VerifyFrame(b)
		g := bytes.Clone(b)
		if SetFrameICRC(g) == nil {
			if err := VerifyFrame(g); err != nil {
				t.Fatalf("SetFrameICRC then VerifyFrame: %v", err)
			}
		}
	})
}
