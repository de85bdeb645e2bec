package farmem

import (
	"encoding/binary"
	"net/netip"
	"time"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/frame"
	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/p4/fwd"
)

// Indices of the Stats counter array.
const (
	StatClassified = iota // far-memory packets whose (type, urgency) hit the classify table
	StatDefault           // far-memory packets that missed it (default action)
	StatMalformed         // packets to or from Port that are not valid far-memory messages (forwarded unclassified)
	NumStats       = 4
)

// StatNames names the Stats counters.
var StatNames = [NumStats]string{"classified", "default", "malformed", ""}

// Counters are the pipeline's packet counters (the forwarding counters are
// the base pipeline's).
type Counters struct {
	ClassPackets [NumClasses]uint64 // by Class(type, urgency), valid far-memory packets
	ClassBytes   [NumClasses]uint64 // frame bytes, as counted on ingress
	Stats        [NumStats]uint64
}

// action is the action of a classify entry or of the default entry.
type action struct {
	set  bool  // set_priority; otherwise NoAction
	prio uint8 // 0 to 7
}

// Pipeline classifies far-memory packets into egress priorities and forwards
// every frame as p4/fwd does. It implements emulator.Pipeline and
// p4rt.Device (device.go). Like every pipeline it is not safe for
// concurrent use: the substrate calls Process and the control plane on one
// goroutine.
type Pipeline struct {
	base     *fwd.Pipeline
	classify [NumClasses]action // by Class(type, urgency); set=false: no entry
	entries  [NumClasses]bool   // an entry is installed
	def      action             // default action (NoAction unless modified)
	Counters Counters

	rt *p4rt.Target // the P4Runtime view, made on first use
}

// New wraps the forwarding pipeline base.
func New(base *fwd.Pipeline) *Pipeline {
	return &Pipeline{base: base}
}

// Base returns the wrapped forwarding pipeline.
func (p *Pipeline) Base() *fwd.Pipeline { return p.base }

// Process implements emulator.Pipeline.
func (p *Pipeline) Process(now time.Duration, in int, f []byte, out emulator.Emitter) {
	payload, ok := farmemPayload(f)
	if !ok || in == emulator.CPUPort {
		p.base.Process(now, in, f, out)
		return
	}
	if frame.DstIPv4(f) == p.base.Self() {
		p.base.Process(now, in, f, out) // addressed to the switch: not ours to classify
		return
	}
	if f[14+8] <= 1 {
		p.base.Counters.Drops[fwd.DropTTL]++ // as farmem.p4: before classification
		return
	}
	if present, ok := frame.UDPChecksum(f); !present || !ok {
		// A far-memory message must carry a correct UDP checksum: a
		// corrupted page is dropped here, never stored (docs/farmem.md,
		// "Integrity").
		p.base.Counters.Drops[fwd.DropChecksum]++
		return
	}
	h, _, err := Parse(payload)
	if err != nil {
		p.Counters.Stats[StatMalformed]++
		p.base.ForwardFrom(in, f, -1, out)
		return
	}
	c := Class(h.Type, h.Urgency)
	p.Counters.ClassPackets[c]++
	p.Counters.ClassBytes[c] += uint64(len(f))
	a := p.def
	if p.entries[c] {
		a = p.classify[c]
		p.Counters.Stats[StatClassified]++
	} else {
		p.Counters.Stats[StatDefault]++
	}
	if !a.set {
		p.base.ForwardFrom(in, f, -1, out)
		return
	}
	setDSCP(f, a.prio<<3)
	p.base.ForwardFrom(in, f, int(a.prio), out)
}

// farmemPayload returns the UDP payload of a well-formed UDP/IPv4 frame to
// or from Port.
func farmemPayload(f []byte) ([]byte, bool) {
	// Fast path for the frames tracebed's hosts build: no IPv4 options.
	if len(f) >= frame.HeaderLen && f[14] == 0x45 && f[23] == frame.ProtoUDP &&
		binary.BigEndian.Uint16(f[12:]) == frame.EtherTypeIPv4 {
		sp, dp := binary.BigEndian.Uint16(f[34:]), binary.BigEndian.Uint16(f[36:])
		if sp != Port && dp != Port {
			return nil, false
		}
	}
	h, payload, err := frame.ParseUDP(f)
	if err != nil || (h.Src.Port() != Port && h.Dst.Port() != Port) {
		return nil, false
	}
	return payload, true
}

// setDSCP rewrites the DSCP of an IPv4 frame, keeping the ECN bits, and
// recomputes the header checksum.
func setDSCP(f []byte, dscp uint8) {
	ihl := int(f[14]&0x0f) * 4
	f[15] = dscp<<2 | f[15]&0x03
	f[24], f[25] = 0, 0
	binary.BigEndian.PutUint16(f[24:], frame.Checksum(f[14:14+ihl]))
}

// SetRoute installs a route outside P4Runtime (tests, controllers in
// process): it is the base pipeline's.
func (p *Pipeline) SetRoute(dst netip.Addr, ports []int) { p.base.SetRoute(dst, ports) }

// Priority returns the priority the classify table gives (type, urgency),
// and whether an entry exists.
func (p *Pipeline) Priority(t Type, urgency uint8) (uint8, bool) {
	c := Class(t, urgency)
	return p.classify[c].prio, p.entries[c]
}
