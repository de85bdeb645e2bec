// Package ina is tracebed's in-network aggregation (INA) data plane: the
// packet format, the Go pipeline (the twin of ina.p4 for bmv2 v1model), its
// P4Info and its P4Runtime Device, and the controller helpers that bind
// jobs to switch memory.
//
// A switch holds an array of aggregators, each with two copies (SwitchML's
// shadow copy) of k int32 values, a contributor bitmap, a count and the
// identity of the chunk it aggregates. A job-table entry, keyed by job id and
// a range of rounds, binds a job to a range of aggregators (its pool) in one
// of two modes:
//
//   - ModePool (SwitchML, DynaINA): packet slot s uses aggregator base+s;
//     the last contribution turns the packet into a result multicast to the
//     job's workers; a retransmission of a finished chunk is answered from
//     the shadow copy and never added twice.
//   - ModeShared (ATP): the aggregator is chosen by a hash of job and chunk
//     over the pool; a packet whose aggregator is held by another chunk is
//     marked collision and forwarded to the job's parameter server, which
//     aggregates in software; an aggregator is freed when its result is sent.
//
// The byte layout, the protocol and the rebinding protocol are documented in
// docs/ina-dataplane.md; the layout table is repeated below.
package ina

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
)

// The INA header follows the UDP header (frame offset 42). All fields are
// big-endian.
//
//	off size field     meaning
//	  0    1 proto     protocol version, must be 1
//	  1    1 flags     FlagData | FlagResult | FlagRetransmit | FlagCollision | FlagOverflow | FlagPartial
//	  2    2 job       job id, 0 to MaxJobs-1
//	  4    2 slot      pool-relative aggregator index (ModePool); ignored by ModeShared
//	  6    1 ver       version bit: which of the slot's two copies (0 or 1); other bits 0
//	  7    1 worker    worker id, 0 to workers-1
//	  8    1 workers   number of workers of the job, 1 to MaxWorkers
//	  9    1 reserved  0
//	 10    2 k         number of values that follow
//	 12    4 round     iteration number (all-reduce round) of the job
//	 16    4 offset    chunk offset: index of the first value in the job's tensor
//	 20    4 bitmap    contributors: 1<<worker in data; all workers in a result; the subset in a partial
//	 24   4k values    k × int32, two's complement
const (
	HeaderLen  = 24
	Proto      = 1
	MaxWorkers = 32   // the contributor bitmap is 32 bits wide
	MaxJobs    = 1024 // job ids index per-job counters and registers
	// Port is the well-known UDP port of INA packets at switches and
	// parameter servers (SwitchML's 0xBEE0).
	Port = 48864
	// DefaultK is the default number of values per packet: 256 bytes of
	// payload, as in SwitchML.
	DefaultK = 64
	// MaxK bounds k so a packet fits a 1500-byte MTU with room to spare.
	MaxK = 256
)

// Flags of the INA header.
const (
	FlagData       uint8 = 0x01 // a worker's contribution
	FlagResult     uint8 = 0x02 // a finished aggregate
	FlagRetransmit uint8 = 0x04 // a worker's retransmission after a timeout
	FlagCollision  uint8 = 0x08 // not aggregated by the switch: forwarded to the parameter server
	FlagOverflow   uint8 = 0x10 // the aggregate overflowed int32 (values wrapped; never use them)
	FlagPartial    uint8 = 0x20 // a partial aggregate flushed from a switch to the parameter server
	knownFlags           = FlagData | FlagResult | FlagRetransmit | FlagCollision | FlagOverflow | FlagPartial
	kindFlags            = FlagData | FlagResult | FlagPartial
)

// Header is a decoded INA header.
type Header struct {
	Flags   uint8
	Job     uint16
	Slot    uint16
	Ver     uint8
	Worker  uint8
	Workers uint8
	K       uint16
	Round   uint32
	Offset  uint32
	Bitmap  uint32
}

// Is reports whether all of flags are set.
func (h *Header) Is(flags uint8) bool { return h.Flags&flags == flags }

// AllWorkers returns the bitmap with one bit for each of n workers.
func AllWorkers(n int) uint32 {
	if n >= 32 {
		return ^uint32(0)
	}
	return uint32(1)<<uint(n) - 1
}

// ErrMalformed is wrapped by every decoding error.
var ErrMalformed = errors.New("malformed INA packet")

// Parse decodes the INA header of payload (a UDP payload) and checks that it
// is consistent: known protocol and flags, exactly one of data, result and
// partial, a worker id below the worker count, a bitmap that fits the kind
// of packet, and exactly k values present. It returns the values as a
// subslice of payload. It never panics.
func Parse(payload []byte) (Header, []byte, error) {
	var h Header
	if len(payload) < HeaderLen {
		return h, nil, fmt.Errorf("%w: %d bytes, the header needs %d", ErrMalformed, len(payload), HeaderLen)
	}
	if payload[0] != Proto {
		return h, nil, fmt.Errorf("%w: protocol version %d, want %d", ErrMalformed, payload[0], Proto)
	}
	h.Flags = payload[1]
	h.Job = binary.BigEndian.Uint16(payload[2:])
	h.Slot = binary.BigEndian.Uint16(payload[4:])
	h.Ver = payload[6]
	h.Worker = payload[7]
	h.Workers = payload[8]
	h.K = binary.BigEndian.Uint16(payload[10:])
	h.Round = binary.BigEndian.Uint32(payload[12:])
	h.Offset = binary.BigEndian.Uint32(payload[16:])
	h.Bitmap = binary.BigEndian.Uint32(payload[20:])
	if err := h.Check(); err != nil {
		return h, nil, err
	}
	if payload[9] != 0 {
		return h, nil, fmt.Errorf("%w: reserved byte is %#x, want 0", ErrMalformed, payload[9])
	}
	if want := HeaderLen + 4*int(h.K); len(payload) != want {
		return h, nil, fmt.Errorf("%w: k = %d needs %d bytes, have %d", ErrMalformed, h.K, want, len(payload))
	}
	return h, payload[HeaderLen:], nil
}

// Check validates the header fields on their own (see Parse).
func (h *Header) Check() error {
	if h.Flags&^knownFlags != 0 {
		return fmt.Errorf("%w: unknown flags %#x", ErrMalformed, h.Flags&^knownFlags)
	}
	if bits.OnesCount8(h.Flags&kindFlags) != 1 {
		return fmt.Errorf("%w: flags %#x: want exactly one of data, result, partial", ErrMalformed, h.Flags)
	}
	if h.Job >= MaxJobs {
		return fmt.Errorf("%w: job %d, want below %d", ErrMalformed, h.Job, MaxJobs)
	}
	if h.Ver > 1 {
		return fmt.Errorf("%w: version %d, want 0 or 1", ErrMalformed, h.Ver)
	}
	if h.Workers == 0 || h.Workers > MaxWorkers {
		return fmt.Errorf("%w: %d workers, want 1 to %d", ErrMalformed, h.Workers, MaxWorkers)
	}
	if h.Worker >= h.Workers {
		return fmt.Errorf("%w: worker %d of %d", ErrMalformed, h.Worker, h.Workers)
	}
	if h.K == 0 || h.K > MaxK {
		return fmt.Errorf("%w: k = %d, want 1 to %d", ErrMalformed, h.K, MaxK)
	}
	all := AllWorkers(int(h.Workers))
	switch {
	case h.Flags&FlagData != 0:
		if h.Bitmap != 1<<h.Worker {
			return fmt.Errorf("%w: data from worker %d has bitmap %#x, want %#x", ErrMalformed, h.Worker, h.Bitmap, uint32(1)<<h.Worker)
		}
	case h.Flags&FlagResult != 0:
		if h.Bitmap != all {
			return fmt.Errorf("%w: result bitmap %#x, want all %d workers (%#x)", ErrMalformed, h.Bitmap, h.Workers, all)
		}
	case h.Flags&FlagPartial != 0:
		if h.Bitmap == 0 || h.Bitmap&^all != 0 {
			return fmt.Errorf("%w: partial bitmap %#x, want a non-empty subset of %#x", ErrMalformed, h.Bitmap, all)
		}
	}
	return nil
}

// Put writes h into the first HeaderLen bytes of b, which must be long
// enough.
func (h *Header) Put(b []byte) {
	_ = b[HeaderLen-1]
	b[0] = Proto
	b[1] = h.Flags
	binary.BigEndian.PutUint16(b[2:], h.Job)
	binary.BigEndian.PutUint16(b[4:], h.Slot)
	b[6] = h.Ver
	b[7] = h.Worker
	b[8] = h.Workers
	b[9] = 0
	binary.BigEndian.PutUint16(b[10:], h.K)
	binary.BigEndian.PutUint32(b[12:], h.Round)
	binary.BigEndian.PutUint32(b[16:], h.Offset)
	binary.BigEndian.PutUint32(b[20:], h.Bitmap)
}

// Append appends a packet with header h and values to b. h.K is set to
// len(values).
func Append(b []byte, h Header, values []int32) []byte {
	h.K = uint16(len(values))
	n := len(b)
	b = append(b, make([]byte, HeaderLen+4*len(values))...)
	h.Put(b[n:])
	PutValues(b[n+HeaderLen:], values)
	return b
}

// PutValues writes values big-endian into b, which must hold them.
func PutValues(b []byte, values []int32) {
	b = b[:4*len(values)]
	for _, v := range values {
		binary.BigEndian.PutUint32(b, uint32(v))
		b = b[4:]
	}
}

// Value returns value i of a values section.
func Value(values []byte, i int) int32 { return int32(binary.BigEndian.Uint32(values[4*i:])) }

// GetValues decodes a values section into dst (len(dst) values).
func GetValues(dst []int32, values []byte) {
	values = values[:4*len(dst)]
	for i := range dst {
		dst[i] = int32(binary.BigEndian.Uint32(values))
		values = values[4:]
	}
}
