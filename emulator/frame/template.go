package frame

import "encoding/binary"

// Template holds the headers of one flow's frames (one source and
// destination), built once: Append writes a frame from it with a copy,
// three length fields and the two checksums, where AppendUDP builds every
// header field by field.
// A host that sends many datagrams to one peer keeps one. The zero value
// is not usable; call NewTemplate.
type Template struct {
	hdr  [HeaderLen]byte // the lengths and both checksums left zero
	sum  uint32          // the ones' complement sum of that IPv4 header
	usum uint64          // the UDP checksum's sum of the pseudo-header and the ports
}

// NewTemplate returns the template of h's frames.
func NewTemplate(h UDP) Template {
	var t Template
	AppendUDP(t.hdr[:0], h, nil)
	ip := t.hdr[offIP : offIP+IPv4Len]
	binary.BigEndian.PutUint16(ip[2:], 0)  // total length
	binary.BigEndian.PutUint16(ip[10:], 0) // checksum
	binary.BigEndian.PutUint16(t.hdr[offUDP+4:], 0)
	binary.BigEndian.PutUint16(t.hdr[offUDP+6:], 0)
	t.usum = uint64(binary.BigEndian.Uint32(ip[12:])) + uint64(binary.BigEndian.Uint32(ip[16:])) + ProtoUDP
	t.usum += uint64(h.Src.Port()) + uint64(h.Dst.Port())
	for i := 0; i < IPv4Len; i += 2 {
		t.sum += uint32(ip[i])<<8 | uint32(ip[i+1])
	}
	return t
}

// Append appends a frame carrying payload to b and returns the extended
// slice: the same bytes as AppendUDP(b, h, payload) for the h the template
// was made from.
func (t *Template) Append(b []byte, payload []byte) []byte {
	b = t.appendHeaders(b, payload)
	f := b[len(b)-HeaderLen-len(payload):]
	// The pseudo-header's length and the UDP header's are the same.
	n16 := uint64(UDPLen + len(payload))
	c := ^fold(sum64(t.usum+2*n16, payload))
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(f[offUDP+6:], c)
	return b
}

// AppendNoChecksum is Append with the UDP checksum left 0, "no checksum"
// (RFC 768; see emulator.ChecksumOmitter): the frame costs a copy of the
// payload and no pass over it.
func (t *Template) AppendNoChecksum(b []byte, payload []byte) []byte {
	return t.appendHeaders(b, payload)
}

// appendHeaders appends the frame with every field but the UDP checksum,
// which it leaves 0.
func (t *Template) appendHeaders(b []byte, payload []byte) []byte {
	n := len(b)
	b = append(b, t.hdr[:]...)
	b = append(b, payload...)
	f := b[n:]
	total := uint32(IPv4Len + UDPLen + len(payload))
	binary.BigEndian.PutUint16(f[offTotalLen:], uint16(total))
	sum := t.sum + total
	sum = sum&0xffff + sum>>16
	sum = sum&0xffff + sum>>16
	binary.BigEndian.PutUint16(f[offIPCsum:], ^uint16(sum))
	binary.BigEndian.PutUint16(f[offUDP+4:], uint16(UDPLen+len(payload)))
	return b
}
