package wire

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/tracebed/tracebed/emulator/frame"
	"github.com/tracebed/tracebed/internal/ieeecrc"
)

// The invariant CRC (IBTA annex A17.3.3, "ICRC for RoCEv2"): the standard
// CRC-32 (polynomial 0x04C11DB7, reflected, initial value and final XOR all
// ones — hash/crc32's IEEE, zlib's crc32) computed over
//
//	8 bytes of 0xFF              (stands for the InfiniBand LRH, absent in RoCEv2)
//	the IPv4 header              with TOS (DSCP and ECN), TTL and header checksum set to all ones
//	the UDP header               with the checksum set to all ones
//	the BTH                      with byte 4 (FECN, BECN, 6 reserved bits) set to all ones
//	everything after the BTH     up to the ICRC: extension headers, payload, pad
//
// and carried little-endian after the pad (the byte order of rdma_rxe and
// of the RNICs whose captures tshark and scapy check; see testdata). The
// masked fields are those a switch may change on the way: routers decrement
// the TTL, ECN marking changes the TOS, the BECN/FECN bits carry congestion.
//
// The other IPv4 and UDP fields (version and header length, total length,
// identification, flags and fragment offset, protocol, addresses, ports,
// UDP length) are covered. An agent sees only the UDP payload, so it
// rebuilds them: Pseudo holds what it cannot derive from the payload and
// the two endpoints.

// Pseudo is the part of the IPv4 and UDP headers the ICRC covers that a
// UDP payload does not carry: the two endpoints, the IPv4 identification
// and the flags and fragment offset. The lengths follow from the payload.
// Addresses that are not IPv4 count as 0.0.0.0.
type Pseudo struct {
	Src, Dst netip.AddrPort // IPv4 addresses and UDP ports
	ID       uint16         // IPv4 identification
	FlagsOff uint16         // IPv4 flags and fragment offset (0x4000: don't fragment)
}

// DontFragment is the IPv4 flags/fragment-offset word of a datagram with
// DF set and no offset.
const DontFragment = 0x4000

// HostPseudo returns the pseudo-header of a datagram that a tracebed host
// sends from src to dst. Hosts on both substrates write identification 0
// with DF set: the sim substrate's frames (emulator/frame.AppendUDP) do,
// and so does Linux for the unconnected UDP sockets of the netns substrate
// (ip_select_ident_segs gives a DF datagram of a socket without a
// connected peer the ID 0), checked against tshark on both.
func HostPseudo(src, dst netip.AddrPort) Pseudo {
	return Pseudo{Src: src, Dst: dst, FlagsOff: DontFragment}
}

// lrhCRC is the CRC state after the 8 bytes of 0xFF that stand for the LRH.
var lrhCRC = ieeecrc.UpdateShort(0, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})

// ICRC returns the invariant CRC of a RoCEv2 packet whose UDP payload,
// without its trailing ICRC, is ib (the BTH and what follows), sent with
// the headers that ps describes. ib must hold at least a BTH.
func ICRC(ps Pseudo, ib []byte) uint32 {
	c := NewPseudoCRC(ps)
	return c.ICRC(ib)
}

// PseudoCRC is the part of the ICRC of every packet between two endpoints
// that does not change from packet to packet: the CRC state after the LRH
// stand-in and the masked IPv4 and UDP headers of a Pseudo, with their
// length fields left out. A device that sends to or receives from a peer
// makes one once and computes every packet's ICRC from it (its methods give
// exactly what ICRC, VerifyICRC and AppendTrailer give for that Pseudo),
// instead of hashing those 36 bytes again for each packet.
//
// The CRC is linear: the state after headers whose lengths differ is the
// state with the lengths zero XOR the contribution of the length fields'
// bits alone. The IPv4 total length's is tabulated by byte (lenCRC); the
// UDP length goes with each packet's BTH, in the 16 bytes that end the
// UDP header and the BTH, which the CPU folds in one step where it can.
type PseudoCRC struct {
	base uint32 // the state after the IPv4 header with length 0 and the UDP ports
}

// NewPseudoCRC returns the PseudoCRC of ps.
func NewPseudoCRC(ps Pseudo) PseudoCRC {
	var h [ipPortsLen]byte
	h[0] = 0x45
	h[1] = 0xff // TOS
	// h[2:4], the total length, is left 0.
	binary.BigEndian.PutUint16(h[4:], ps.ID)
	binary.BigEndian.PutUint16(h[6:], ps.FlagsOff)
	h[8] = 0xff // TTL
	h[9] = frame.ProtoUDP
	h[10], h[11] = 0xff, 0xff // header checksum
	s, d := as4(ps.Src.Addr()), as4(ps.Dst.Addr())
	copy(h[12:16], s[:])
	copy(h[16:20], d[:])
	u := h[frame.IPv4Len:]
	binary.BigEndian.PutUint16(u[0:], ps.Src.Port())
	binary.BigEndian.PutUint16(u[2:], ps.Dst.Port())
	return PseudoCRC{base: ieeecrc.UpdateShort(lrhCRC, h[:])}
}

// ipPortsLen is the bytes of the IPv4 header (without options) and the
// UDP ports: what PseudoCRC folds once.
const ipPortsLen = frame.IPv4Len + 4

// lenCRC[i][b] is what byte b as the high (i = 0) or low (1) byte of the
// IPv4 total length adds to the CRC register after the IPv4 header and
// the UDP ports: the register after those 24 bytes with b there and zeros
// elsewhere, from a zero register.
var lenCRC = func() (t [2][256]uint32) {
	for i, off := range [2]int{2, 3} {
		for b := range 256 {
			var h [ipPortsLen]byte
			h[off] = byte(b)
			// From register 0 (crc ^0): the register is the complement
			// of the CRC returned.
			t[i][b] = ^ieeecrc.UpdateShort(^uint32(0), h[:])
		}
	}
	return t
}()

// head returns the CRC state after the LRH stand-in, the masked IPv4 and
// UDP headers of a datagram of udpLen bytes (UDP header included) and the
// masked BTH that starts ib.
func (c *PseudoCRC) head(udpLen int, ib []byte) uint32 {
	ipLen := uint16(frame.IPv4Len + udpLen)
	crc := c.base ^ lenCRC[0][ipLen>>8] ^ lenCRC[1][ipLen&0xff]
	var b [4 + BTHLen]byte // UDP length and checksum, BTH
	binary.BigEndian.PutUint16(b[0:], uint16(udpLen))
	b[2], b[3] = 0xff, 0xff // UDP checksum
	copy(b[4:], ib[:BTHLen])
	b[4+4] = 0xff // FECN, BECN, reserved
	return ieeecrc.UpdateShort(crc, b[:])
}

// ICRC is ICRC(ps, ib) for c's ps.
func (c *PseudoCRC) ICRC(ib []byte) uint32 {
	crc := c.head(frame.UDPLen+len(ib)+ICRCLen, ib)
	return ieeecrc.Update(crc, ib[BTHLen:])
}

// Verify is VerifyICRC(ps, b) for c's ps.
func (c *PseudoCRC) Verify(b []byte) bool {
	if len(b) < MinLen {
		return false
	}
	n := len(b) - ICRCLen
	return c.ICRC(b[:n]) == binary.LittleEndian.Uint32(b[n:])
}

// AppendTrailer is AppendTrailer(dst, ps, hdr, payload) for c's ps.
func (c *PseudoCRC) AppendTrailer(dst []byte, hdr, payload []byte) []byte {
	pad := zero4[:PadLen(len(payload))]
	crc := c.head(frame.UDPLen+len(hdr)+len(payload)+len(pad)+ICRCLen, hdr)
	crc = ieeecrc.UpdateShort(crc, hdr[BTHLen:])
	crc = ieeecrc.Update(crc, payload)
	crc = ieeecrc.UpdateShort(crc, pad)
	dst = append(dst, pad...)
	return binary.LittleEndian.AppendUint32(dst, crc)
}

// as4 returns the IPv4 address a, or zeros if a is not one.
func as4(a netip.Addr) [4]byte {
	if a = a.Unmap(); a.Is4() {
		return a.As4()
	}
	return [4]byte{}
}

// VerifyICRC reports whether the ICRC that ends the UDP payload b is right
// for headers ps. b must hold at least MinLen bytes.
func VerifyICRC(ps Pseudo, b []byte) bool {
	c := NewPseudoCRC(ps)
	return c.Verify(b)
}

// FrameICRC computes the ICRC of the RoCEv2 packet in an Ethernet/IPv4/UDP
// frame from the frame's own headers (IPv4 options included), as a switch
// or a capture checker sees them. It returns the UDP payload too (ICRC
// included). It fails on frames that are not UDP to port 4791 or too
// short to hold a BTH and an ICRC.
func FrameICRC(f []byte) (uint32, []byte, error) {
	h, payload, err := frame.ParseUDP(f)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: %v", ErrNotRoCE, err)
	}
	if h.Dst.Port() != Port {
		return 0, nil, fmt.Errorf("%w: UDP port %d", ErrNotRoCE, h.Dst.Port())
	}
	if len(payload) < MinLen {
		return 0, nil, ErrShort
	}
	ihl := int(f[frame.EthLen]&0x0f) * 4
	var buf [60 + frame.UDPLen + BTHLen]byte
	m := copy(buf[:], f[frame.EthLen:frame.EthLen+ihl+frame.UDPLen])
	buf[1] = 0xff                       // TOS
	buf[8] = 0xff                       // TTL
	buf[10], buf[11] = 0xff, 0xff       // header checksum
	buf[ihl+6], buf[ihl+7] = 0xff, 0xff // UDP checksum
	m += copy(buf[m:], payload[:BTHLen])
	buf[ihl+frame.UDPLen+4] = 0xff // BTH FECN, BECN, reserved
	crc := ieeecrc.UpdateShort(lrhCRC, buf[:m])
	crc = ieeecrc.Update(crc, payload[BTHLen:len(payload)-ICRCLen])
	return crc, payload, nil
}

// ParseFrame decodes the RoCEv2 packet in an Ethernet/IPv4/UDP frame, as
// a switch pipeline sees it: the addressing, and the packet (whose
// Payload aliases f). It checks the UDP port and the packet's lengths,
// not the ICRC (VerifyFrame does).
func ParseFrame(f []byte) (frame.UDP, Packet, error) {
	h, payload, err := frame.ParseUDP(f)
	if err != nil {
		return h, Packet{}, fmt.Errorf("%w: %v", ErrNotRoCE, err)
	}
	if h.Dst.Port() != Port {
		return h, Packet{}, fmt.Errorf("%w: UDP port %d", ErrNotRoCE, h.Dst.Port())
	}
	p, err := Parse(payload)
	return h, p, err
}

// VerifyFrame checks the ICRC of the RoCEv2 packet in frame f.
func VerifyFrame(f []byte) error {
	crc, payload, err := FrameICRC(f)
	if err != nil {
		return err
	}
	if got := binary.LittleEndian.Uint32(payload[len(payload)-ICRCLen:]); got != crc {
		return fmt.Errorf("%w: carried %#08x, computed %#08x", ErrICRC, got, crc)
	}
	return nil
}

// SetFrameICRC recomputes the ICRC of the RoCEv2 packet in frame f in
// place, for a switch that has rewritten its payload or a covered header
// field (an in-network aggregator, say). Fields the ICRC masks (TTL, TOS,
// checksums, FECN/BECN) may change without it.
func SetFrameICRC(f []byte) error {
	crc, payload, err := FrameICRC(f)
	if err != nil {
		return err
	}
	binary.LittleEndian.PutUint32(payload[len(payload)-ICRCLen:], crc)
	return nil
}
