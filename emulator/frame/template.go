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
	b = append(t.AppendHeaders(b, len(payload)), payload...)
	t.SetChecksum(b[len(b)-HeaderLen-len(payload):])
	return b
}

// AppendHeaders appends the headers of a frame that will carry n bytes of
// payload, with every field but the UDP checksum, which it leaves 0 ("no
// checksum", RFC 768; see emulator.ChecksumOmitter). The caller appends
// the payload (from as many buffers as it holds it in, with one copy),
// then calls SetChecksum unless it leaves the checksum out.
func (t *Template) AppendHeaders(b []byte, n int) []byte {
	k := len(b)
	b = append(b, t.hdr[:]...)
	f := b[k:]
	total := uint32(IPv4Len + UDPLen + n)
	binary.BigEndian.PutUint16(f[offTotalLen:], uint16(total))
	sum := t.sum + total
	sum = sum&0xffff + sum>>16
	sum = sum&0xffff + sum>>16
	binary.BigEndian.PutUint16(f[offIPCsum:], ^uint16(sum))
	binary.BigEndian.PutUint16(f[offUDP+4:], uint16(UDPLen+n))
	return b
}

// SetChecksum writes the UDP checksum of f, a frame of the template's flow
// that AppendHeaders began and whose payload is complete.
func (t *Template) SetChecksum(f []byte) {
	payload := f[HeaderLen:]
	// The pseudo-header's length and the UDP header's are the same.
	n16 := uint64(UDPLen + len(payload))
	c := ^fold(sum64(t.usum+2*n16, payload))
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(f[offUDP+6:], c)
}
