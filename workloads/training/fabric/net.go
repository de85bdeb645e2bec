package fabric

import (
	"fmt"
	"time"

	"github.com/tracebed/tracebed/p4/ina"
)

// Net holds the protocol and host parameters of the INA model beyond the
// topology (docs/dynaina.md lists their defaults and sources).
type Net struct {
	// Payload is the gradient bytes one INA packet carries (k × 4; 256 for
	// k = 64, as SwitchML and p4/ina).
	Payload int
	// Frame is the bytes an INA or ring packet occupies on the wire
	// (322 for k = 64: Ethernet, IPv4, UDP, the 24-byte INA header).
	Frame int
	// Turnaround is a worker's (and a parameter server's) time from
	// receiving a result to sending the slot's next packet.
	Turnaround time.Duration
	// Control is the latency of a pool turn handoff: the controller tells
	// a waiting job's workers that the pool is theirs.
	Control time.Duration
	// Jitter is the coefficient of variation of each worker's compute
	// time per iteration (normal, truncated at ±3σ); the all-reduce starts
	// when the slowest worker is done.
	Jitter float64
	// ComputeScale multiplies every model's compute time (a faster GPU
	// than the reference: < 1).
	ComputeScale float64
	// ATPHold is how long a shared-mode (ATP) aggregator stays held:
	// "return" — until the result comes back from the parameter server
	// through the switch, the ATP paper's release rule (its switch clears
	// an aggregator when the parameter packet of the same job and sequence
	// passes back; docs/dynaina.md, "ATP as published") — or
	// "completion" — from a chunk's first to its last contribution, what
	// p4/ina does (validated against it).
	ATPHold string
	// ATPCollisions is what a collision does to the colliding window slot:
	// "remap" — ATP moves the slot to another aggregator (its parameter
	// server picks one no job of its own uses and the workers adopt it),
	// so slots that collide settle on free aggregators and only the part
	// of the jobs' windows the pool cannot hold keeps colliding — or
	// "hash" — every chunk hashes anew (by job and chunk offset, what
	// p4/ina does), so a chunk collides with the share of the pool other
	// jobs hold.
	ATPCollisions string
}

// ATP hold and collision settings.
const (
	HoldCompletion = "completion"
	HoldReturn     = "return"
	CollideRemap   = "remap"
	CollideHash    = "hash"
)

// DefaultNet are the parameters of the experiments unless a spec says
// otherwise: ATP as published (release on return, remapping collided
// slots).
var DefaultNet = Net{Payload: 256, Frame: 322, Turnaround: 10 * time.Microsecond, Control: 50 * time.Microsecond, Jitter: 0.02, ComputeScale: 1, ATPHold: HoldReturn, ATPCollisions: CollideRemap}

// DataPlaneATP returns n with ATP as the p4/ina data plane runs it
// (release at completion, a hash per chunk): what packet-level runs do,
// and what the flow model is validated against.
func (n Net) DataPlaneATP() Net {
	n.ATPHold, n.ATPCollisions = HoldCompletion, CollideHash
	return n
}

// DataPlaneHold is the release rule of shared-mode bindings in the INA
// data plane for n's ATPHold (ina.HoldReturn or ina.HoldCompletion).
func (n Net) DataPlaneHold() uint8 {
	if n.ATPHold == HoldReturn {
		return ina.HoldReturn
	}
	return ina.HoldCompletion
}

// DataPlanePlace is how shared-mode chunks find their aggregator in the
// INA data plane for n's ATPCollisions: named by the packets, collided
// slots remapped (ina.PlaceSlot), or hashed (ina.PlaceHash).
func (n Net) DataPlanePlace() uint8 {
	if n.ATPCollisions == CollideRemap {
		return ina.PlaceSlot
	}
	return ina.PlaceHash
}

// Check validates n. Its errors are *NetError, naming the spec's key.
func (n Net) Check() error {
	switch {
	case n.Payload < 4 || n.Payload > 9000:
		return netErrorf("payload", "payload %d: want 4 to 9000 bytes", n.Payload)
	case n.Frame < n.Payload || n.Frame > 9216:
		return netErrorf("frame", "frame %d: want the payload (%d) plus headers, at most 9216", n.Frame, n.Payload)
	case n.Turnaround < 0:
		return netErrorf("turnaround", "turnaround and control latency must not be negative")
	case n.Control < 0:
		return netErrorf("control", "turnaround and control latency must not be negative")
	case !(n.Jitter >= 0 && n.Jitter <= 0.3):
		return netErrorf("jitter", "jitter %v: want 0 to 0.3", n.Jitter)
	case !(n.ComputeScale > 0 && n.ComputeScale <= 100):
		return netErrorf("compute_scale", "compute_scale %v: want more than 0, at most 100", n.ComputeScale)
	case n.ATPHold != "" && n.ATPHold != HoldCompletion && n.ATPHold != HoldReturn:
		return netErrorf("atp_hold", "atp_hold %q: want %s or %s", n.ATPHold, HoldReturn, HoldCompletion)
	case n.ATPCollisions != "" && n.ATPCollisions != CollideRemap && n.ATPCollisions != CollideHash:
		return netErrorf("atp_collisions", "atp_collisions %q: want %s or %s", n.ATPCollisions, CollideRemap, CollideHash)
	}
	return nil
}

// NetError is an invalid Net field; Field is the spec's key.
type NetError struct {
	Field string
	Err   error
}

func (e *NetError) Error() string { return e.Err.Error() }

func (e *NetError) Unwrap() error { return e.Err }

func netErrorf(field, format string, args ...any) error {
	return &NetError{Field: field, Err: fmt.Errorf(format, args...)}
}
