package farmem

import (
	"math"
	"time"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/frame"
	"github.com/tracebed/tracebed/internal/units"
)

// BulkPort is the UDP port of other tenants' bulk traffic at its sinks.
const BulkPort = 9

// bulk is another tenant's traffic towards a memory server's machine: ON/OFF
// bursts at the sender's line rate, exponential ON and OFF periods (the
// classic on/off source of datacenter traffic models). Several senders per
// server overlap now and then and overload its link, which is what makes
// far-memory packets queue, and drop, behind them.
type bulk struct {
	env     emulator.Env
	to      []emulator.Addr
	pick    *picker
	payload []byte
	perSec  float64 // frames per second at line rate
	on, off time.Duration
	stopped func() bool
	sent    uint64
	next    time.Duration // when the next burst is due
	// Backpressure: drained is when the NIC will have sent every frame
	// queued so far (at line rate); a burst queues only what keeps the
	// backlog within maxBacklog frames, as a sender blocked on a full
	// socket buffer would. throttled counts the frames it left out.
	drained    time.Duration
	maxBacklog float64
	throttled  uint64
}

// bulkBacklog bounds what a bulk sender keeps queued on its NIC: eight
// mean bursts, and at least 1 MiB. On a link slower than a burst of one
// frame (a 9000-byte frame takes 720 µs at 100 Mbps, more than a 50 µs
// burst), bursts would otherwise queue faster than the link sends them,
// and the queue, and memory, would grow without bound.
func bulkBacklog(burst time.Duration, rate units.Rate, size units.Bytes) float64 {
	bytes := max(8*burst.Seconds()*float64(rate)/8, float64(units.MiB))
	return math.Ceil(bytes / float64(size))
}

// newBulk returns a sender that is ON a share of the time and sends each
// burst to one of to, chosen by weights (spreadBulk).
func newBulk(to []emulator.Addr, weights []float64, size units.Bytes, rate units.Rate, share float64, burst time.Duration, stopped func() bool) *bulk {
	b := &bulk{to: to, pick: newPicker(weights), payload: make([]byte, int(size)-frame.HeaderLen), stopped: stopped}
	b.perSec = float64(rate) / (float64(size) * 8)
	b.maxBacklog = bulkBacklog(burst, rate, size)
	b.on = burst
	b.off = time.Duration(float64(burst) * (1 - share) / share)
	return b
}

// Start implements emulator.Agent. The sender's datagrams carry UDP
// checksum 0, "no checksum" (RFC 768), as RoCEv2 traffic does: their
// payload is filler that the sink only counts (the discard port), and
// summing each 9000-byte frame at the sender and again at the sink was a
// third of a glitter-100g run's CPU time on sim. Nothing else changes:
// the frames have the same size and headers, queue and are forwarded
// alike.
func (b *bulk) Start(env emulator.Env) {
	b.env = env
	if o, ok := env.(emulator.ChecksumOmitter); ok {
		o.OmitUDPChecksum()
	}
	b.next = env.Now() + b.exp(b.off) // a random phase
	b.env.After(b.next-env.Now(), b.burst)
}

func (b *bulk) exp(mean time.Duration) time.Duration {
	return time.Duration(b.env.Rand().ExpFloat64() * float64(mean))
}

// burst queues one ON period's frames on the NIC, which sends them back to
// back at line rate, and schedules the next burst after an OFF period. The
// schedule is kept in absolute times, so that neither a late timer nor a
// Send that blocks on a full socket buffer (real sockets) stretches the
// period and lowers the load.
func (b *bulk) burst() {
	if b.stopped() {
		return
	}
	d := b.exp(b.on)
	n := int(math.Max(1, math.Round(d.Seconds()*b.perSec)))
	to := b.to[b.pick.next()]
	now := b.env.Now()
	start := max(now, b.drained)
	if room := b.maxBacklog - (start-now).Seconds()*b.perSec; float64(n) > room {
		k := max(0, int(room))
		b.throttled += uint64(n - k)
		n = k
	}
	for range n {
		b.env.Send(to, b.payload)
	}
	b.sent += uint64(n)
	b.drained = start + time.Duration(float64(n)/b.perSec*1e9)
	b.next += d + b.exp(b.off)
	b.env.After(max(0, b.next-b.env.Now()), b.burst)
}

func (b *bulk) Recv(emulator.Addr, []byte) {}

// sink counts what reaches it.
type sink struct {
	bytes uint64
	last  time.Duration
	env   emulator.Env
}

func (s *sink) Start(env emulator.Env) { s.env = env }

func (s *sink) Recv(_ emulator.Addr, p []byte) {
	s.bytes += uint64(len(p) + frame.HeaderLen)
	s.last = s.env.Now()
}
