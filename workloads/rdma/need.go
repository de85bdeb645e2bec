package rdma

import (
	"fmt"
	"math"
	"time"

	"github.com/tracebed/tracebed/emulator/frame"
	"github.com/tracebed/tracebed/emulator/roce"
	"github.com/tracebed/tracebed/emulator/roce/wire"
	"github.com/tracebed/tracebed/experiments"
)

// Memory of a roce-demo run besides the two buffers (h1's source, h2's
// target and its canaries), per item, as in workloads/incast: a frame in
// flight is its bytes (up to a quarter more in the allocator's size
// classes) and a Packet, an event and a queue slot; a host its node, port,
// device, queue pairs and connection manager. Measured against the peak
// live heap by TestSoak.
const (
	frameOverhead = 320
	hostBytes     = 64 << 10
	// eventsByFrame: sent, serialized on each of the two links, switched,
	// received.
	eventsByFrame = 5
)

// frameLen is the largest frame of the move on the wire.
func (p Params) frameLen() int { return frame.HeaderLen + wire.Len(wire.WriteFirst, p.MTU) }

// serialize is how long one frame of n bytes takes on a link of the move.
func (p Params) serialize(n int) time.Duration {
	return time.Duration(float64(n) * 8 / float64(p.Rate) * float64(time.Second))
}

// checkPace refuses parameters with which no move can finish: a buffer
// that takes longer than RunLimit to cross the links at their rate, a
// first window that holds the connection manager's RTU back longer than
// the passive side waits for it, or an ACK timeout shorter than the time
// between two acknowledgements when nothing is lost (the requester asks
// for one every AckEvery packets), with which the requester times out on
// every window and runs out of retries.
func (p Params) checkPace(bad func(key, format string, args ...any) error) error {
	packets := (int64(p.Bytes) + int64(p.MTU) - 1) / int64(p.MTU)
	if least := time.Duration(float64(packets) * float64(p.serialize(p.frameLen()))); least > RunLimit {
		return bad("rate", "%v moves %v in %v at the least, beyond a run's limit of %v of testbed time; want a higher rate or fewer bytes", p.Rate, p.Bytes, least.Round(time.Millisecond), RunLimit)
	}
	// The RTU leaves h1 behind its first window: the passive side must
	// still be waiting for it (the measured failure is at the full wait;
	// a quarter of it is left for the substrate).
	patience := cmTimeout * cmRetries * 3 / 4
	if first := time.Duration(min(int64(p.Window), packets)) * p.serialize(p.frameLen()); first > patience {
		return bad("window", "%d packets take %v to leave h1 at %v, and h2's connection manager gives up waiting for the RTU queued behind them after %v; want a window of at most %d, or a higher rate", p.Window, first.Round(time.Microsecond), p.Rate, cmTimeout*cmRetries, max(1, int(patience/p.serialize(p.frameLen()))))
	}
	ackEvery := min(roce.DefaultAckEvery, max(1, p.Window/4))
	gap := time.Duration(ackEvery+2)*p.serialize(p.frameLen()) + 4*time.Duration(p.Delay)
	if timeout := wire.AckTimeout(timeoutCode(time.Duration(p.Timeout))); timeout < gap {
		return bad("timeout", "%v (as an IBTA code: %v) is shorter than the %v between two acknowledgements at %v (%d packets of %d bytes and a round trip), so every window would time out; want a timeout of at least %v", p.Timeout, timeout, gap, p.Rate, ackEvery, p.frameLen(), fmtCeil(gap))
	}
	return nil
}

// fmtCeil rounds d up to a duration a spec can say briefly.
func fmtCeil(d time.Duration) string {
	for _, u := range []time.Duration{time.Microsecond, time.Millisecond, time.Second} {
		if d < 1000*u {
			return fmt.Sprint(time.Duration(math.Ceil(float64(d)/float64(u))) * u)
		}
	}
	return fmt.Sprint(d.Round(time.Second) + time.Second)
}

// Need implements experiments.Estimator: the source and the target (the
// buffer twice), the frames that can be in flight at once (a window, and
// under READ the responses of the READs in progress, queued at the sender; the switch's two
// egress buffers and what the links hold), the hosts; the events of every
// packet go-back-N sends, at most what the links carry within RunLimit.
func (e *experiment) Need(name string) experiments.Need {
	p := e.scenarios[name]
	fl := float64(p.frameLen())
	packets := math.Ceil(float64(p.Bytes) / float64(p.MTU))
	// h1 answers a READ with all its responses at once, up to the READ
	// depth of them.
	var reading float64
	for _, pol := range e.policies {
		if pol.Verb == VerbRead {
			reading = float64(min(p.Outstanding, 16)) * math.Ceil(float64(p.Message)/float64(p.MTU))
		}
	}
	onWire := math.Ceil(float64(p.Rate)*time.Duration(p.Delay).Seconds()/(8*fl)) + 2
	inFlight := math.Min(packets, float64(p.Window)+reading) + 2*(float64(p.Buffer)/fl+1) + 2*onWire
	mem := 2*float64(p.Bytes) + 2*guard + inFlight*(1.25*fl+frameOverhead) + 2*hostBytes
	// Go-back-N sends about a window again for every frame lost,
	// duplicated or reordered (Cost); duplicates travel too.
	sent := packets * (1 + 2*float64(p.Loss+p.Reorder+p.Duplicate)*float64(p.Window)) * (1 + float64(p.Duplicate))
	sent = math.Min(sent, 2*float64(p.Rate)*RunLimit.Seconds()/(8*fl)) // both directions at line rate
	entry := e.entries[name]
	return experiments.Need{
		Memory:   int64(math.Min(mem, math.MaxInt64/2)),
		Events:   sent * eventsByFrame,
		MemoryBy: experiments.EntryCause(e.spec, entry, "bytes", "the buffer at h1 and its copy at h2, and the frames in flight"),
		EventsBy: experiments.EntryCause(e.spec, entry, "bytes", "every packet sent, go-back-N's again, a few events each"),
	}
}
