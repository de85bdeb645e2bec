// Package farmem is tracebed's far-memory data plane: the packet format that
// paging hosts and memory servers exchange (workloads/farmem), the Go
// pipeline that classifies far-memory packets into egress priority queues
// (the twin of farmem.p4 for bmv2 v1model), its P4Info and its P4Runtime
// Device, and the controller helpers that program it.
//
// The pipeline recognises four messages — a demand fetch request, its
// response carrying the page, an eviction carrying a page and the sender's
// urgency, and the eviction's acknowledgement — and looks the pair
// (message type, urgency) up in a table that the controller fills through
// P4Runtime. A hit sets the packet's egress priority (standard_metadata.
// priority on bmv2 with --priority-queues) and re-marks its DSCP to the
// class selector of that priority, so the class is visible on the wire and
// honoured by switches that only look at DSCP. Everything else is forwarded
// as by p4/fwd. Which priorities a system installs is the system's business
// (systems/glitter, systems/fastswap); the data plane only carries them out.
package farmem

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The far-memory header follows the UDP header (frame offset 42). All fields
// are big-endian.
//
//	off size field    meaning
//	  0    2 magic    0x464d ("FM")
//	  2    1 vt       version (high nibble, 1) | message type (low nibble)
//	  3    1 flags    0x80 retransmission | 0x40 not found | bits 0-2 urgency
//	  4    4 id       request id, chosen by the host; echoed by the server
//	  8    8 page     page number in the host's address space
//	 16    4 version  page version: how many times the host has written the page back
//	 20    4 sum      CRC-32C of the page data (data and write messages)
//	 24    n data     the page (n = page size) in data and write messages; none otherwise
//
// Bits 3-5 of flags are reserved and must be zero.
const (
	HeaderLen = 24
	Magic     = 0x464d
	Version   = 1
	// Port is the UDP port memory servers listen on; the pipeline treats a
	// packet to or from it as far-memory traffic.
	Port = 7470
	// HostPort is the UDP port of paging hosts.
	HostPort = 7471
	// MaxUrgency is the highest urgency: the sender is blocked.
	MaxUrgency = 7
	// MinPageSize and MaxPageSize bound the data of a message.
	MinPageSize = 512
	MaxPageSize = 32 << 10 // so that a data message fits the 16-bit UDP length
)

// Type is a message type.
type Type uint8

// Message types.
const (
	TypeRead  Type = 1 // host → server: fetch a page (a demand fetch)
	TypeData  Type = 2 // server → host: the page, or not found
	TypeWrite Type = 3 // host → server: an eviction (write-back) with the host's urgency
	TypeAck   Type = 4 // server → host: the write is stored; echoes its urgency
	NumTypes       = 5 // types index counters as type<<3 | urgency
)

var typeNames = [NumTypes]string{"", "read", "data", "write", "ack"}

func (t Type) String() string {
	if int(t) < NumTypes && typeNames[t] != "" {
		return typeNames[t]
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Flags of the header (besides the urgency in bits 0-2).
const (
	FlagRetransmit uint8 = 0x80
	FlagNotFound   uint8 = 0x40
	urgencyMask    uint8 = 0x07
	reservedFlags  uint8 = 0x38
)

// Header is a decoded far-memory header.
type Header struct {
	Type    Type
	Urgency uint8 // 0 (none) to MaxUrgency (blocked)
	Flags   uint8 // FlagRetransmit, FlagNotFound
	ID      uint32
	Page    uint64
	Version uint32
	Sum     uint32
}

// Errors returned by Parse, wrapped with detail.
var (
	ErrShort   = errors.New("farmem: message too short")
	ErrMagic   = errors.New("farmem: not a far-memory message")
	ErrVersion = errors.New("farmem: unsupported version")
	ErrType    = errors.New("farmem: unknown message type")
	ErrFlags   = errors.New("farmem: reserved flags set")
	ErrLength  = errors.New("farmem: wrong data length for the message type")
)

// Append appends the header and data to b and returns the extended slice.
// It does not check that data fits the type; Parse does.
func (h Header) Append(b []byte, data []byte) []byte {
	var hdr [HeaderLen]byte
	binary.BigEndian.PutUint16(hdr[0:], Magic)
	hdr[2] = Version<<4 | uint8(h.Type)&0x0f
	hdr[3] = h.Flags&(FlagRetransmit|FlagNotFound) | h.Urgency&urgencyMask
	binary.BigEndian.PutUint32(hdr[4:], h.ID)
	binary.BigEndian.PutUint64(hdr[8:], h.Page)
	binary.BigEndian.PutUint32(hdr[16:], h.Version)
	binary.BigEndian.PutUint32(hdr[20:], h.Sum)
	b = append(b, hdr[:]...)
	return append(b, data...)
}

// Parse decodes a far-memory message (a UDP payload). It returns the header
// and the data, a subslice of b. Read and ack messages carry no data; write
// messages and data messages that were found carry a page whose size is a
// power of two from MinPageSize to MaxPageSize; a not-found data message
// carries none. Parse never panics.
func Parse(b []byte) (Header, []byte, error) {
	var h Header
	if len(b) < HeaderLen {
		return h, nil, fmt.Errorf("%w: %d bytes, want at least %d", ErrShort, len(b), HeaderLen)
	}
	if m := binary.BigEndian.Uint16(b); m != Magic {
		return h, nil, fmt.Errorf("%w: magic %#04x", ErrMagic, m)
	}
	if v := b[2] >> 4; v != Version {
		return h, nil, fmt.Errorf("%w: %d", ErrVersion, v)
	}
	h.Type = Type(b[2] & 0x0f)
	if h.Type == 0 || h.Type >= NumTypes {
		return h, nil, fmt.Errorf("%w: %d", ErrType, h.Type)
	}
	if b[3]&reservedFlags != 0 {
		return h, nil, fmt.Errorf("%w: %#02x", ErrFlags, b[3])
	}
	h.Flags = b[3] &^ urgencyMask
	h.Urgency = b[3] & urgencyMask
	h.ID = binary.BigEndian.Uint32(b[4:])
	h.Page = binary.BigEndian.Uint64(b[8:])
	h.Version = binary.BigEndian.Uint32(b[16:])
	h.Sum = binary.BigEndian.Uint32(b[20:])
	data := b[HeaderLen:]
	n := len(data)
	pageOK := n >= MinPageSize && n <= MaxPageSize && n&(n-1) == 0
	switch {
	case h.Type == TypeRead || h.Type == TypeAck:
		if n != 0 {
			return h, nil, fmt.Errorf("%w: %s message with %d data bytes", ErrLength, h.Type, n)
		}
	case h.Type == TypeData && h.Flags&FlagNotFound != 0:
		if n != 0 {
			return h, nil, fmt.Errorf("%w: not-found data message with %d data bytes", ErrLength, n)
		}
	case !pageOK:
		return h, nil, fmt.Errorf("%w: %s message with %d data bytes, want a page (a power of two from %d to %d)", ErrLength, h.Type, n, MinPageSize, MaxPageSize)
	}
	if h.Flags&FlagNotFound != 0 && h.Type != TypeData {
		return h, nil, fmt.Errorf("%w: not-found flag on a %s message", ErrFlags, h.Type)
	}
	return h, data, nil
}

// Class is the index of a (type, urgency) pair in the pipeline's counters.
func Class(t Type, urgency uint8) int { return int(t)<<3 | int(urgency&urgencyMask) }

// NumClasses is the size of the class counter array.
const NumClasses = NumTypes << 3
