package p4rt

import (
	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc/codes"
)

// PacketIO translates between P4Runtime's PacketOut and PacketIn stream
// messages (§16.1) and the frames a pipeline exchanges with its CPU port,
// as bmv2's P4Runtime server does: a packet-out becomes the P4 program's
// @controller_header("packet_out") header — the P4Info's metadata fields,
// in order, packed most significant bit first into whole bytes — followed
// by the payload; a frame the pipeline sends to the CPU port starts with
// the @controller_header("packet_in") header, which becomes the PacketIn's
// metadata. A program without such a header exchanges bare payloads.
type PacketIO struct {
	in, out *p4configv1.ControllerPacketMetadata
}

// NewPacketIO reads the controller headers of info.
func NewPacketIO(info *p4configv1.P4Info) *PacketIO {
	p := &PacketIO{}
	for _, m := range info.GetControllerPacketMetadata() {
		switch m.GetPreamble().GetName() {
		case "packet_in":
			p.in = m
		case "packet_out":
			p.out = m
		}
	}
	return p
}

// HasPacketOut reports whether the program declares a packet_out header.
func (p *PacketIO) HasPacketOut() bool { return p.out != nil }

// HasPacketIn reports whether the program declares a packet_in header.
func (p *PacketIO) HasPacketIn() bool { return p.in != nil }

func headerBytes(m *p4configv1.ControllerPacketMetadata) int {
	bitsN := 0
	for _, f := range m.GetMetadata() {
		bitsN += int(f.GetBitwidth())
	}
	return (bitsN + 7) / 8
}

// OutFrame returns the frame to inject on the CPU port for po: the
// packet_out header built from its metadata, then its payload. Every
// metadata field of the P4Info must be given exactly once, with a value
// that fits its width (§16.1): otherwise the error is INVALID_ARGUMENT (or
// OUT_OF_RANGE for a value too wide).
func (p *PacketIO) OutFrame(po *p4v1.PacketOut) ([]byte, error) {
	if p.out == nil {
		if len(po.GetMetadata()) > 0 {
			return nil, errf(codes.InvalidArgument, "packet-out metadata given, but the program declares no packet_out header")
		}
		return append([]byte(nil), po.GetPayload()...), nil
	}
	fields := p.out.GetMetadata()
	vals := make([][]byte, len(fields))
	for _, md := range po.GetMetadata() {
		i := -1
		for j, f := range fields {
			if f.GetId() == md.GetMetadataId() {
				i = j
			}
		}
		if i < 0 {
			return nil, errf(codes.InvalidArgument, "packet-out metadata id %d is not in the P4Info's packet_out header", md.GetMetadataId())
		}
		if vals[i] != nil {
			return nil, errf(codes.InvalidArgument, "packet-out metadata %q given twice", fields[i].GetName())
		}
		v, err := CanonicalBits(md.GetValue(), int(fields[i].GetBitwidth()))
		if err != nil {
			return nil, prefix(err, "packet-out metadata %q", fields[i].GetName())
		}
		vals[i] = v
	}
	for i, v := range vals {
		if v == nil {
			return nil, errf(codes.InvalidArgument, "packet-out metadata %q (id %d) missing", fields[i].GetName(), fields[i].GetId())
		}
	}
	n := headerBytes(p.out)
	frame := make([]byte, n, n+len(po.GetPayload()))
	off := 0
	for i, f := range fields {
		w := int(f.GetBitwidth())
		putBits(frame, off, w, vals[i])
		off += w
	}
	return append(frame, po.GetPayload()...), nil
}

// PacketIn turns a frame the pipeline sent to the CPU port into a PacketIn
// message: its packet_in header becomes the metadata (canonical values),
// the rest the payload. A frame shorter than the header is an error.
func (p *PacketIO) PacketIn(frame []byte) (*p4v1.PacketIn, error) {
	if p.in == nil {
		return &p4v1.PacketIn{Payload: append([]byte(nil), frame...)}, nil
	}
	n := headerBytes(p.in)
	if len(frame) < n {
		return nil, errf(codes.InvalidArgument, "packet-in frame of %d bytes is shorter than the %d-byte packet_in header", len(frame), n)
	}
	pi := &p4v1.PacketIn{Payload: append([]byte(nil), frame[n:]...)}
	off := 0
	for _, f := range p.in.GetMetadata() {
		w := int(f.GetBitwidth())
		pi.Metadata = append(pi.Metadata, &p4v1.PacketMetadata{MetadataId: f.GetId(), Value: getBits(frame[:n], off, w)})
		off += w
	}
	return pi, nil
}

// putBits writes the w low bits of the canonical big-endian value v into
// buf at bit offset off (most significant bit first).
func putBits(buf []byte, off, w int, v []byte) {
	for i := 0; i < w; i++ {
		// bit i of the field, counting from its most significant bit, is
		// bit (w-1-i) of v counting from the least significant.
		k := w - 1 - i
		byteIdx := len(v) - 1 - k/8
		if byteIdx < 0 || v[byteIdx]>>(k%8)&1 == 0 {
			continue
		}
		pos := off + i
		buf[pos/8] |= 0x80 >> (pos % 8)
	}
}

// getBits reads a w-bit field at bit offset off of buf and returns it in
// canonical form.
func getBits(buf []byte, off, w int) []byte {
	out := make([]byte, (w+7)/8)
	for i := 0; i < w; i++ {
		pos := off + i
		if buf[pos/8]&(0x80>>(pos%8)) == 0 {
			continue
		}
		k := w - 1 - i
		out[len(out)-1-k/8] |= 1 << (k % 8)
	}
	c, _ := CanonicalBits(out, w)
	return c
}
