// Package wire is the RoCEv2 wire format of tracebed's soft-RoCE: the
// InfiniBand transport headers carried in UDP datagrams to port 4791, as
// the InfiniBand Architecture Specification (IBTA) Volume 1, chapter 9, and
// its RoCEv2 annex (A17) define them, byte for byte.
//
// A RoCEv2 UDP payload is
//
//	BTH (12) | extension headers | payload | pad (0–3) | ICRC (4)
//
// with the extension headers that the opcode calls for, in this order:
// RETH (16: virtual address, R_Key, DMA length) for RDMA WRITE first/only
// and RDMA READ requests; AETH (4: syndrome, MSN) for acknowledgements and
// RDMA READ response first/last/only; ImmDt (4) for the "with immediate"
// opcodes. Multi-byte fields are big-endian. The ICRC is a CRC-32 over a
// pseudo-header (masked IPv4 and UDP headers), the BTH with its variant
// bits masked and everything after it (see ICRC); it is carried
// little-endian, as rdma_rxe and RNICs write it.
//
// The package has no state and allocates nothing on its packet paths:
// Parse returns a view into the caller's buffer and Append writes into a
// caller's buffer. It knows nothing of queue pairs; package emulator/roce
// builds reliable connections on it, and switch pipelines that rewrite
// RoCEv2 payloads recompute the ICRC with SetFrameICRC.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// Port is the UDP destination port of RoCEv2 (IANA "roce").
const Port = 4791

// Header sizes in bytes.
const (
	BTHLen      = 12
	RETHLen     = 16
	AETHLen     = 4
	ImmLen      = 4
	ICRCLen     = 4
	CNPLen      = 16 // the reserved bytes after a CNP's BTH
	MinLen      = BTHLen + ICRCLen
	DefaultPKey = 0xffff // the default partition (full membership)
)

// Path MTUs an RC connection may use (IBTA 256 to 4096 bytes of payload
// per packet).
var MTUs = [...]int{256, 512, 1024, 2048, 4096}

// ValidMTU reports whether m is one of MTUs.
func ValidMTU(m int) bool {
	for _, v := range MTUs {
		if v == m {
			return true
		}
	}
	return false
}

// Opcode is the BTH opcode: the transport (bits 7–5, 000 for RC) and the
// operation (bits 4–0).
type Opcode uint8

// The reliable-connection opcodes (IBTA table 38), and the RoCEv2
// congestion notification packet.
const (
	SendFirst          Opcode = 0x00
	SendMiddle         Opcode = 0x01
	SendLast           Opcode = 0x02
	SendLastImm        Opcode = 0x03
	SendOnly           Opcode = 0x04
	SendOnlyImm        Opcode = 0x05
	WriteFirst         Opcode = 0x06
	WriteMiddle        Opcode = 0x07
	WriteLast          Opcode = 0x08
	WriteLastImm       Opcode = 0x09
	WriteOnly          Opcode = 0x0a
	WriteOnlyImm       Opcode = 0x0b
	ReadRequest        Opcode = 0x0c
	ReadResponseFirst  Opcode = 0x0d
	ReadResponseMiddle Opcode = 0x0e
	ReadResponseLast   Opcode = 0x0f
	ReadResponseOnly   Opcode = 0x10
	Acknowledge        Opcode = 0x11
	AtomicAcknowledge  Opcode = 0x12
	CompareSwap        Opcode = 0x13
	FetchAdd           Opcode = 0x14
	SendLastInv        Opcode = 0x16
	SendOnlyInv        Opcode = 0x17
	// CNP is the RoCEv2 congestion notification packet (annex A17.9.3):
	// a BTH with BECN set, 16 reserved bytes, the ICRC.
	CNP Opcode = 0x81
)

// Flags of an opcode: which headers follow the BTH and where the packet
// stands in its message.
const (
	fKnown    = 1 << iota
	fRETH     // an RDMA extended transport header follows the BTH
	fAETH     // an ACK extended transport header
	fImm      // immediate data
	fPayload  // carries payload
	fFirst    // first packet of a multi-packet message
	fMiddle   // a middle packet
	fLast     // last packet of a multi-packet message
	fOnly     // the single packet of a message
	fRequest  // sent by the requester
	fResponse // sent by the responder
	fSend     // SEND family
	fWrite    // RDMA WRITE family
	fRead     // RDMA READ request or response
	fCNP      // congestion notification
	fUnsup    // defined by IBTA, not implemented here (atomics, invalidate)
)

var opFlags = [256]uint32{
	SendFirst:          fKnown | fPayload | fFirst | fRequest | fSend,
	SendMiddle:         fKnown | fPayload | fMiddle | fRequest | fSend,
	SendLast:           fKnown | fPayload | fLast | fRequest | fSend,
	SendLastImm:        fKnown | fPayload | fImm | fLast | fRequest | fSend,
	SendOnly:           fKnown | fPayload | fOnly | fRequest | fSend,
	SendOnlyImm:        fKnown | fPayload | fImm | fOnly | fRequest | fSend,
	WriteFirst:         fKnown | fRETH | fPayload | fFirst | fRequest | fWrite,
	WriteMiddle:        fKnown | fPayload | fMiddle | fRequest | fWrite,
	WriteLast:          fKnown | fPayload | fLast | fRequest | fWrite,
	WriteLastImm:       fKnown | fPayload | fImm | fLast | fRequest | fWrite,
	WriteOnly:          fKnown | fRETH | fPayload | fOnly | fRequest | fWrite,
	WriteOnlyImm:       fKnown | fRETH | fImm | fPayload | fOnly | fRequest | fWrite,
	ReadRequest:        fKnown | fRETH | fOnly | fRequest | fRead,
	ReadResponseFirst:  fKnown | fAETH | fPayload | fFirst | fResponse | fRead,
	ReadResponseMiddle: fKnown | fPayload | fMiddle | fResponse | fRead,
	ReadResponseLast:   fKnown | fAETH | fPayload | fLast | fResponse | fRead,
	ReadResponseOnly:   fKnown | fAETH | fPayload | fOnly | fResponse | fRead,
	Acknowledge:        fKnown | fAETH | fOnly | fResponse,
	AtomicAcknowledge:  fKnown | fUnsup,
	CompareSwap:        fKnown | fUnsup,
	FetchAdd:           fKnown | fUnsup,
	SendLastInv:        fKnown | fUnsup,
	SendOnlyInv:        fKnown | fUnsup,
	CNP:                fKnown | fCNP,
}

var opNames = map[Opcode]string{
	SendFirst: "SEND_FIRST", SendMiddle: "SEND_MIDDLE", SendLast: "SEND_LAST",
	SendLastImm: "SEND_LAST_WITH_IMMEDIATE", SendOnly: "SEND_ONLY", SendOnlyImm: "SEND_ONLY_WITH_IMMEDIATE",
	WriteFirst: "RDMA_WRITE_FIRST", WriteMiddle: "RDMA_WRITE_MIDDLE", WriteLast: "RDMA_WRITE_LAST",
	WriteLastImm: "RDMA_WRITE_LAST_WITH_IMMEDIATE", WriteOnly: "RDMA_WRITE_ONLY", WriteOnlyImm: "RDMA_WRITE_ONLY_WITH_IMMEDIATE",
	ReadRequest: "RDMA_READ_REQUEST", ReadResponseFirst: "RDMA_READ_RESPONSE_FIRST", ReadResponseMiddle: "RDMA_READ_RESPONSE_MIDDLE",
	ReadResponseLast: "RDMA_READ_RESPONSE_LAST", ReadResponseOnly: "RDMA_READ_RESPONSE_ONLY",
	Acknowledge: "ACKNOWLEDGE", AtomicAcknowledge: "ATOMIC_ACKNOWLEDGE", CompareSwap: "COMPARE_SWAP", FetchAdd: "FETCH_ADD",
	SendLastInv: "SEND_LAST_WITH_INVALIDATE", SendOnlyInv: "SEND_ONLY_WITH_INVALIDATE", CNP: "CNP",
}

func (o Opcode) String() string {
	if n, ok := opNames[o]; ok {
		return n
	}
	return fmt.Sprintf("OPCODE_%#02x", uint8(o))
}

func (o Opcode) is(f uint32) bool { return opFlags[o]&f != 0 }

// Known reports whether o is an RC opcode or CNP.
func (o Opcode) Known() bool { return o.is(fKnown) }

// Supported reports whether tracebed implements o: the RC SEND, RDMA
// WRITE and RDMA READ opcodes, ACKNOWLEDGE and CNP (decoded, ignored). The
// atomics and the invalidate opcodes are not.
func (o Opcode) Supported() bool { return o.is(fKnown) && !o.is(fUnsup) }

// HasRETH reports whether an RETH follows the BTH.
func (o Opcode) HasRETH() bool { return o.is(fRETH) }

// HasAETH reports whether an AETH follows the BTH.
func (o Opcode) HasAETH() bool { return o.is(fAETH) }

// HasImm reports whether the packet carries immediate data.
func (o Opcode) HasImm() bool { return o.is(fImm) }

// HasPayload reports whether the packet may carry payload.
func (o Opcode) HasPayload() bool { return o.is(fPayload) }

// IsFirst, IsMiddle, IsLast and IsOnly give the packet's place in its
// message.
func (o Opcode) IsFirst() bool  { return o.is(fFirst) }
func (o Opcode) IsMiddle() bool { return o.is(fMiddle) }
func (o Opcode) IsLast() bool   { return o.is(fLast) }
func (o Opcode) IsOnly() bool   { return o.is(fOnly) }

// StartsMessage reports whether o is a first or only packet.
func (o Opcode) StartsMessage() bool { return o.is(fFirst | fOnly) }

// EndsMessage reports whether o is a last or only packet.
func (o Opcode) EndsMessage() bool { return o.is(fLast | fOnly) }

// IsRequest reports whether a requester sends o (SEND, WRITE, READ
// request).
func (o Opcode) IsRequest() bool { return o.is(fRequest) }

// IsResponse reports whether a responder sends o (ACK, READ response).
func (o Opcode) IsResponse() bool { return o.is(fResponse) }

// IsSend, IsWrite and IsRead give the operation family.
func (o Opcode) IsSend() bool  { return o.is(fSend) }
func (o Opcode) IsWrite() bool { return o.is(fWrite) }
func (o Opcode) IsRead() bool  { return o.is(fRead) }

// IsCNP reports whether o is the congestion notification packet.
func (o Opcode) IsCNP() bool { return o.is(fCNP) }

// HeaderLen returns the bytes of BTH and extension headers of o.
func (o Opcode) HeaderLen() int {
	n := BTHLen
	if o.HasRETH() {
		n += RETHLen
	}
	if o.HasAETH() {
		n += AETHLen
	}
	if o.HasImm() {
		n += ImmLen
	}
	if o.IsCNP() {
		n += CNPLen
	}
	return n
}

// BTH is the base transport header.
type BTH struct {
	Opcode Opcode
	SE     bool   // solicited event
	M      bool   // migration state
	Pad    uint8  // pad bytes after the payload, 0–3
	TVer   uint8  // transport header version, 0
	PKey   uint16 // partition key
	FECN   bool   // forward explicit congestion notification (variant: masked in the ICRC)
	BECN   bool   // backward explicit congestion notification (variant)
	DestQP uint32 // 24 bits
	AckReq bool   // the requester asks for an acknowledgement
	PSN    uint32 // 24 bits
}

// RETH is the RDMA extended transport header.
type RETH struct {
	VA     uint64 // virtual address at the responder
	RKey   uint32
	Length uint32 // DMA length of the whole message
}

// Syndrome kinds of an AETH (bits 6–5).
const (
	SyndromeACK = 0
	SyndromeRNR = 1
	SyndromeNAK = 3
)

// NAK codes (the low 5 bits of a NAK syndrome).
const (
	NAKSequence     = 0 // PSN sequence error
	NAKInvalid      = 1 // invalid request
	NAKRemoteAccess = 2 // remote access error
	NAKRemoteOp     = 3 // remote operational error
	NAKInvalidRDReq = 4 // invalid RD request
)

// AETH is the ACK extended transport header.
type AETH struct {
	Syndrome uint8  // bit 7 reserved; bits 6–5 kind; bits 4–0 credits, RNR timer or NAK code
	MSN      uint32 // 24 bits: message sequence number
}

// Kind returns the syndrome kind: SyndromeACK, SyndromeRNR, SyndromeNAK
// or 2 (reserved).
func (a AETH) Kind() uint8 { return a.Syndrome >> 5 & 3 }

// Value returns the low 5 bits: the credit count of an ACK, the timer of
// an RNR NAK, the code of a NAK.
func (a AETH) Value() uint8 { return a.Syndrome & 0x1f }

// ACKSyndrome, RNRSyndrome and NAKSyndrome build syndromes.
func ACKSyndrome(credits uint8) uint8 { return SyndromeACK<<5 | credits&0x1f }
func RNRSyndrome(timer uint8) uint8   { return SyndromeRNR<<5 | timer&0x1f }
func NAKSyndrome(code uint8) uint8    { return SyndromeNAK<<5 | code&0x1f }

// Errors of Parse. They name what is wrong; receivers drop the packet and
// count it by the error.
var (
	ErrShort   = errors.New("roce: packet shorter than its headers")
	ErrVersion = errors.New("roce: unknown transport header version")
	ErrOpcode  = errors.New("roce: unknown or unsupported opcode")
	ErrLength  = errors.New("roce: payload and pad inconsistent with the opcode")
	ErrICRC    = errors.New("roce: ICRC mismatch")
	ErrNotRoCE = errors.New("roce: not a RoCEv2 frame")
)

// Packet is a decoded RoCEv2 UDP payload. Payload aliases the buffer it was
// parsed from.
type Packet struct {
	BTH
	RETH    RETH   // valid if Opcode.HasRETH()
	AETH    AETH   // valid if Opcode.HasAETH()
	Imm     uint32 // valid if Opcode.HasImm()
	Payload []byte // without the pad
	ICRC    uint32 // as carried
}

// Parse decodes a RoCEv2 UDP payload. It checks the lengths, the version
// and the opcode, never the ICRC (which needs the IP and UDP headers; see
// VerifyICRC), and never panics. Payload aliases b.
func Parse(b []byte) (Packet, error) {
	var p Packet
	err := p.Decode(b)
	return p, err
}

// Decode is Parse into p: it sets every field of p (those Parse would not
// have decoded to zero). A receiver that decodes every packet into the
// same place saves copying Parse's result.
func (p *Packet) Decode(b []byte) error {
	*p = Packet{}
	if len(b) < MinLen {
		return ErrShort
	}
	p.Opcode = Opcode(b[0])
	p.SE = b[1]&0x80 != 0
	p.M = b[1]&0x40 != 0
	p.Pad = b[1] >> 4 & 3
	p.TVer = b[1] & 0x0f
	p.PKey = binary.BigEndian.Uint16(b[2:])
	p.FECN = b[4]&0x80 != 0
	p.BECN = b[4]&0x40 != 0
	p.DestQP = uint32(b[5])<<16 | uint32(b[6])<<8 | uint32(b[7])
	p.AckReq = b[8]&0x80 != 0
	p.PSN = uint32(b[9])<<16 | uint32(b[10])<<8 | uint32(b[11])
	p.ICRC = binary.LittleEndian.Uint32(b[len(b)-ICRCLen:])
	if p.TVer != 0 {
		return ErrVersion
	}
	if !p.Opcode.Supported() {
		return ErrOpcode
	}
	hl := p.Opcode.HeaderLen()
	if len(b) < hl+ICRCLen {
		return ErrShort
	}
	h := b[BTHLen:]
	if p.Opcode.HasRETH() {
		p.RETH.VA = binary.BigEndian.Uint64(h)
		p.RETH.RKey = binary.BigEndian.Uint32(h[8:])
		p.RETH.Length = binary.BigEndian.Uint32(h[12:])
		h = h[RETHLen:]
	}
	if p.Opcode.HasAETH() {
		p.AETH.Syndrome = h[0]
		p.AETH.MSN = uint32(h[1])<<16 | uint32(h[2])<<8 | uint32(h[3])
		h = h[AETHLen:]
	}
	if p.Opcode.HasImm() {
		p.Imm = binary.BigEndian.Uint32(h)
	}
	body := b[hl : len(b)-ICRCLen]
	if !p.Opcode.HasPayload() {
		if len(body) != 0 || p.Pad != 0 {
			return ErrLength
		}
		return nil
	}
	// The payload and its pad fill a whole number of 4-byte words.
	if len(body) < int(p.Pad) || len(body)%4 != 0 {
		return ErrLength
	}
	p.Payload = body[:len(body)-int(p.Pad)]
	return nil
}

// Header is what Append writes before the payload. Pad is computed from
// the payload; the other BTH fields are written as given.
type Header struct {
	BTH
	RETH RETH
	AETH AETH
	Imm  uint32
}

// PadLen returns the pad bytes after n bytes of payload.
func PadLen(n int) int { return -n & 3 }

// Len returns the length of the UDP payload that Append writes for h and
// n bytes of payload.
func Len(op Opcode, n int) int { return op.HeaderLen() + n + PadLen(n) + ICRCLen }

// Append appends the UDP payload of a RoCEv2 packet — headers, payload,
// pad and ICRC (computed over ps) — to dst and returns the extended slice.
// h.Opcode must be supported; payload must be empty for opcodes without
// payload. It is AppendHeader, the payload and AppendTrailer.
func Append(dst []byte, h *Header, payload []byte, ps Pseudo) []byte {
	start := len(dst)
	dst = AppendHeader(dst, h, len(payload))
	hl := len(dst) - start
	dst = append(dst, payload...)
	return AppendTrailer(dst, ps, dst[start:start+hl], dst[start+hl:])
}

// AppendHeader appends the BTH and the extension headers of a packet with
// h's fields and n bytes of payload (which give the BTH's pad count) to
// dst and returns the extended slice. h.Opcode must be supported.
func AppendHeader(dst []byte, h *Header, n int) []byte {
	op := h.Opcode
	pad := PadLen(n)
	// The headers are written in place, every byte of them.
	start := len(dst)
	dst = slices.Grow(dst, op.HeaderLen())[:start+op.HeaderLen()]
	b := dst[start:]
	b[0] = byte(op)
	b[1] = byte(pad)<<4 | h.TVer&0x0f
	if h.SE {
		b[1] |= 0x80
	}
	if h.M {
		b[1] |= 0x40
	}
	binary.BigEndian.PutUint16(b[2:], h.PKey)
	b[4] = 0
	if h.FECN {
		b[4] |= 0x80
	}
	if h.BECN {
		b[4] |= 0x40
	}
	put24(b[5:], h.DestQP)
	b[8] = 0
	if h.AckReq {
		b[8] = 0x80
	}
	put24(b[9:], h.PSN)
	k := BTHLen
	if op.HasRETH() {
		binary.BigEndian.PutUint64(b[k:], h.RETH.VA)
		binary.BigEndian.PutUint32(b[k+8:], h.RETH.RKey)
		binary.BigEndian.PutUint32(b[k+12:], h.RETH.Length)
		k += RETHLen
	}
	if op.HasAETH() {
		b[k] = h.AETH.Syndrome
		put24(b[k+1:], h.AETH.MSN)
		k += AETHLen
	}
	if op.HasImm() {
		binary.BigEndian.PutUint32(b[k:], h.Imm)
		k += ImmLen
	}
	if op.IsCNP() {
		clear(b[k : k+CNPLen])
	}
	return dst
}

// AppendTrailer appends the pad and the ICRC (computed over ps) that end
// the packet whose headers are hdr (as AppendHeader wrote them) and whose
// payload is payload, to dst and returns the extended slice. The three
// may lie anywhere: a sender that keeps its payload elsewhere sends
// hdr, payload and the trailer as one datagram without joining them.
func AppendTrailer(dst []byte, ps Pseudo, hdr, payload []byte) []byte {
	c := NewPseudoCRC(ps)
	return c.AppendTrailer(dst, hdr, payload)
}

var zero4 [4]byte

func put24(b []byte, v uint32) {
	b[0], b[1], b[2] = byte(v>>16), byte(v>>8), byte(v)
}
