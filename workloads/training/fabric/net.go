package fabric

import (
	"errors"
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
	// RDMAPayload is the gradient bytes one packet of FreeINA's INA path
	// carries (k × 4; 0 means DefaultRDMAPayload, 1024: a RoCE path MTU
	// of 1024). It must be a whole number of aggregators.
	RDMAPayload int
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

// MaxTurnaround bounds Turnaround and Control. Far beyond any host or
// controller, it keeps the flow model's streams exact: at 1000 s a
// turnaround, a stream of dynaina-100g ended with bytes left (the model's
// float64 clock, at times of 10^8 s, loses the stream's last bytes).
const MaxTurnaround = time.Second

// Check validates n: every problem, each a *NetError naming the spec's
// key (joined with errors.Join when there are several).
func (n Net) Check() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, netErrorf(field, format, args...))
	}
	if n.Payload < 4 || n.Payload > 9000 {
		bad("payload", "payload %d: want 4 to 9000 bytes", n.Payload)
	} else if n.Frame < n.Payload || n.Frame > 9216 {
		bad("frame", "frame %d: want the payload (%d) plus headers, at most 9216", n.Frame, n.Payload)
	}
	if n.Turnaround < 0 || n.Turnaround > MaxTurnaround {
		bad("turnaround", "turnaround %v: want 0 to %v (the papers' workers take 10µs)", n.Turnaround, MaxTurnaround)
	}
	if n.Control < 0 || n.Control > MaxTurnaround {
		bad("control", "control latency %v: want 0 to %v (a controller's handoff takes tens of µs)", n.Control, MaxTurnaround)
	}
	if !(n.Jitter >= 0 && n.Jitter <= 0.3) {
		bad("jitter", "jitter %v: want 0 to 0.3", n.Jitter)
	}
	if !(n.ComputeScale > 0 && n.ComputeScale <= 100) {
		bad("compute_scale", "compute_scale %v: want more than 0, at most 100", n.ComputeScale)
	}
	if n.ATPHold != "" && n.ATPHold != HoldCompletion && n.ATPHold != HoldReturn {
		bad("atp_hold", "atp_hold %q: want %s or %s", n.ATPHold, HoldReturn, HoldCompletion)
	}
	if n.ATPCollisions != "" && n.ATPCollisions != CollideRemap && n.ATPCollisions != CollideHash {
		bad("atp_collisions", "atp_collisions %q: want %s or %s", n.ATPCollisions, CollideRemap, CollideHash)
	}
	if n.RDMAPayload != 0 && (n.RDMAPayload < AggregatorBytes || n.RDMAPayload > 4096 || n.RDMAPayload%AggregatorBytes != 0) {
		bad("rdma_payload", "rdma_payload %d: want 256 to 4096 bytes, a multiple of 256 (a RoCE path MTU holds it)", n.RDMAPayload)
	}
	return errors.Join(errs...)
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
