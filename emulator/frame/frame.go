// Package frame reads and writes the Ethernet/IPv4/UDP frames that tracebed's
// hosts send and its pipelines forward.
//
// It is the zero-allocation header access a switch's packet path needs:
// accessors over a []byte in the style of gVisor's tcpip/header. Captures and
// tests decode the same frames with gopacket, which checks this package.
//
// Byte layout of the frames tracebed's hosts build (offsets from the start of
// the frame):
//
//	 0  Ethernet destination MAC (6)
//	 6  Ethernet source MAC (6)
//	12  EtherType 0x0800 (2)
//	14  IPv4: version/IHL 0x45, TOS, total length, ID, flags/fragment,
//	    TTL, protocol 17, header checksum, source, destination (20)
//	34  UDP: source port, destination port, length, checksum 0 (8)
//	42  payload
package frame

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/tracebed/tracebed/internal/ether"
)

// Header sizes and constants.
const (
	EthLen        = 14
	IPv4Len       = 20
	UDPLen        = 8
	HeaderLen     = EthLen + IPv4Len + UDPLen // bytes before a UDP payload
	EtherTypeIPv4 = 0x0800
	ProtoUDP      = 17
	DefaultTTL    = 64
)

// Offsets of fields within a frame whose IPv4 header has no options.
const (
	offEtherType = 12
	offIP        = EthLen
	offTOS       = offIP + 1
	offTotalLen  = offIP + 2
	offTTL       = offIP + 8
	offProto     = offIP + 9
	offIPCsum    = offIP + 10
	offSrcIP     = offIP + 12
	offDstIP     = offIP + 16
	offUDP       = offIP + IPv4Len
)

// MAC is an Ethernet address (the type topologies use too).
type MAC = ether.MAC

// UDP holds the addressing of a UDP/IPv4 frame.
type UDP struct {
	SrcMAC, DstMAC MAC
	Src, Dst       netip.AddrPort // IPv4 only
	TOS            uint8          // DSCP<<2 | ECN
	TTL            uint8          // 0 means DefaultTTL
}

// Errors returned by the parsers. They are wrapped with detail.
var (
	ErrShort    = errors.New("frame too short")
	ErrNotIPv4  = errors.New("not an IPv4 frame")
	ErrNotUDP   = errors.New("not a UDP datagram")
	ErrBadIPv4  = errors.New("malformed IPv4 header")
	ErrBadUDP   = errors.New("malformed UDP header")
	ErrFragment = errors.New("IPv4 fragment")
)

// AppendUDP appends a complete frame carrying payload to b and returns the
// extended slice. Src and Dst must be IPv4; the payload must fit in an IPv4
// datagram (65507 bytes).
func AppendUDP(b []byte, h UDP, payload []byte) []byte {
	n := len(b)
	b = append(b, make([]byte, HeaderLen)...)
	b = append(b, payload...)
	f := b[n:]
	copy(f[0:6], h.DstMAC[:])
	copy(f[6:12], h.SrcMAC[:])
	binary.BigEndian.PutUint16(f[offEtherType:], EtherTypeIPv4)
	ip := f[offIP:]
	ip[0] = 0x45
	ip[1] = h.TOS
	binary.BigEndian.PutUint16(ip[2:], uint16(IPv4Len+UDPLen+len(payload)))
	binary.BigEndian.PutUint16(ip[6:], 0x4000) // don't fragment
	ttl := h.TTL
	if ttl == 0 {
		ttl = DefaultTTL
	}
	ip[8] = ttl
	ip[9] = ProtoUDP
	s, d := h.Src.Addr().As4(), h.Dst.Addr().As4()
	copy(ip[12:16], s[:])
	copy(ip[16:20], d[:])
	binary.BigEndian.PutUint16(ip[10:], Checksum(ip[:IPv4Len]))
	u := f[offUDP:]
	binary.BigEndian.PutUint16(u[0:], h.Src.Port())
	binary.BigEndian.PutUint16(u[2:], h.Dst.Port())
	binary.BigEndian.PutUint16(u[4:], uint16(UDPLen+len(payload)))
	return b
}

// ParseUDP checks that f is an unfragmented UDP/IPv4 frame and returns its
// addressing and payload (a subslice of f). It tolerates Ethernet padding and
// IPv4 options and never panics.
func ParseUDP(f []byte) (UDP, []byte, error) {
	var h UDP
	ihl, err := checkIPv4(f)
	if err != nil {
		return h, nil, err
	}
	ip := f[offIP:]
	if ip[9] != ProtoUDP {
		return h, nil, ErrNotUDP
	}
	if binary.BigEndian.Uint16(ip[6:])&0x3fff != 0 {
		return h, nil, ErrFragment
	}
	total := int(binary.BigEndian.Uint16(ip[2:]))
	u := ip[ihl:total]
	if len(u) < UDPLen {
		return h, nil, fmt.Errorf("%w: %d bytes after the IPv4 header", ErrBadUDP, len(u))
	}
	ulen := int(binary.BigEndian.Uint16(u[4:]))
	if ulen < UDPLen || ulen > len(u) {
		return h, nil, fmt.Errorf("%w: length field %d, %d bytes present", ErrBadUDP, ulen, len(u))
	}
	copy(h.DstMAC[:], f[0:6])
	copy(h.SrcMAC[:], f[6:12])
	h.TOS, h.TTL = ip[1], ip[8]
	h.Src = netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip[12:16])), binary.BigEndian.Uint16(u[0:]))
	h.Dst = netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip[16:20])), binary.BigEndian.Uint16(u[2:]))
	return h, u[UDPLen:ulen], nil
}

// checkIPv4 validates the Ethernet and IPv4 headers and returns the IPv4
// header length.
func checkIPv4(f []byte) (int, error) {
	if len(f) < EthLen+IPv4Len {
		return 0, fmt.Errorf("%w: %d bytes", ErrShort, len(f))
	}
	if binary.BigEndian.Uint16(f[offEtherType:]) != EtherTypeIPv4 {
		return 0, ErrNotIPv4
	}
	ip := f[offIP:]
	if ip[0]>>4 != 4 {
		return 0, fmt.Errorf("%w: version %d", ErrBadIPv4, ip[0]>>4)
	}
	ihl := int(ip[0]&0x0f) * 4
	total := int(binary.BigEndian.Uint16(ip[2:]))
	if ihl < IPv4Len || total < ihl || total > len(ip) {
		return 0, fmt.Errorf("%w: header length %d, total length %d, %d bytes present", ErrBadIPv4, ihl, total, len(ip))
	}
	return ihl, nil
}

// IsIPv4 reports whether f carries a well-formed IPv4 header.
func IsIPv4(f []byte) bool {
	_, err := checkIPv4(f)
	return err == nil
}

// DstIPv4 returns the IPv4 destination of a frame that passed IsIPv4.
func DstIPv4(f []byte) netip.Addr { return netip.AddrFrom4([4]byte(f[offDstIP : offDstIP+4])) }

// SrcIPv4 returns the IPv4 source of a frame that passed IsIPv4.
func SrcIPv4(f []byte) netip.Addr { return netip.AddrFrom4([4]byte(f[offSrcIP : offSrcIP+4])) }

// TOS returns the IPv4 type-of-service byte of a frame that passed IsIPv4.
func TOS(f []byte) uint8 { return f[offTOS] }

// Proto returns the IPv4 protocol of a frame that passed IsIPv4.
func Proto(f []byte) uint8 { return f[offProto] }

// SetMACs rewrites the Ethernet addresses of f.
func SetMACs(f []byte, src, dst MAC) {
	copy(f[0:6], dst[:])
	copy(f[6:12], src[:])
}

// DecTTL decrements the IPv4 TTL of a frame that passed IsIPv4, updating the
// header checksum incrementally (RFC 1624). It reports false, leaving the frame
// unchanged, when the TTL is already 0 or 1 and the frame must be dropped.
func DecTTL(f []byte) bool {
	ttl := f[offTTL]
	if ttl <= 1 {
		return false
	}
	f[offTTL] = ttl - 1
	// The TTL is the high byte of the 16-bit word at offset 8: it fell by 0x0100.
	sum := uint32(^binary.BigEndian.Uint16(f[offIPCsum:])) + 0xfeff // ~m + m' where m'-m = -0x100
	sum = (sum & 0xffff) + sum>>16
	sum = (sum & 0xffff) + sum>>16
	binary.BigEndian.PutUint16(f[offIPCsum:], ^uint16(sum))
	return true
}

// FlowHash hashes the IPv4 5-tuple of a frame that passed IsIPv4 (ports are
// zero for protocols other than UDP and TCP). Equal flows hash equally on
// every substrate, which is what ECMP needs.
func FlowHash(f []byte) uint32 {
	const prime = 16777619
	h := uint32(2166136261)
	for _, c := range f[offSrcIP : offDstIP+4] {
		h = (h ^ uint32(c)) * prime
	}
	p := f[offProto]
	h = (h ^ uint32(p)) * prime
	ihl := int(f[offIP]&0x0f) * 4
	if (p == ProtoUDP || p == 6) && len(f) >= offIP+ihl+4 {
		for _, c := range f[offIP+ihl : offIP+ihl+4] {
			h = (h ^ uint32(c)) * prime
		}
	}
	// Final avalanche so that low bits, used modulo a small group, mix well.
	h ^= h >> 16
	h *= 0x45d9f3b
	h ^= h >> 16
	return h
}

// Checksum returns the Internet checksum (RFC 1071) of b.
func Checksum(b []byte) uint16 {
	var sum uint32
	for len(b) >= 2 {
		sum += uint32(b[0])<<8 | uint32(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		sum += uint32(b[0]) << 8
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// ClearUDPChecksum sets the UDP checksum of an unfragmented UDP/IPv4 frame to
// zero ("no checksum", allowed for IPv4), as a switch must after rewriting
// the payload. It does nothing to other frames.
func ClearUDPChecksum(f []byte) {
	ihl, err := checkIPv4(f)
	if err != nil || f[offProto] != ProtoUDP || len(f) < offIP+ihl+UDPLen {
		return
	}
	binary.BigEndian.PutUint16(f[offIP+ihl+6:], 0)
}
