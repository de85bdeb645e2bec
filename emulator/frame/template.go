package frame

import "encoding/binary"

// Template holds the headers of one flow's frames (one source and
// destination), built once: Append writes a frame from it with a copy and
// three length fields, where AppendUDP builds every header field by field.
// A host that sends many datagrams to one peer keeps one. The zero value
// is not usable; call NewTemplate.
type Template struct {
	hdr [HeaderLen]byte // the lengths and the IPv4 checksum left zero
	sum uint32          // the ones' complement sum of that IPv4 header
}

// NewTemplate returns the template of h's frames.
func NewTemplate(h UDP) Template {
	var t Template
	AppendUDP(t.hdr[:0], h, nil)
	ip := t.hdr[offIP : offIP+IPv4Len]
	binary.BigEndian.PutUint16(ip[2:], 0)  // total length
	binary.BigEndian.PutUint16(ip[10:], 0) // checksum
	binary.BigEndian.PutUint16(t.hdr[offUDP+4:], 0)
	for i := 0; i < IPv4Len; i += 2 {
		t.sum += uint32(ip[i])<<8 | uint32(ip[i+1])
	}
	return t
}

// Append appends a frame carrying payload to b and returns the extended
// slice: the same bytes as AppendUDP(b, h, payload) for the h the template
// was made from.
func (t *Template) Append(b []byte, payload []byte) []byte {
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
