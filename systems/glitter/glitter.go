// Package glitter is Glitter's eviction policy as tracebed interprets it:
// an adaptive eviction threshold on the host and eviction flow scheduling at
// the switches. The abstract (../shared/seeds/) gives the two mechanisms and
// the goal — application blocking happens less often, and each block is
// shorter — but not their design; every choice below is ours and is
// documented with its source in docs/glitter.md.
//
// Host (Engine): Fastswap's background reclaimer triggers at a fixed point
// (usage over memory.high). Glitter keeps a reserve of free frames sized
// from what it measures — the demand rate D (faults and first touches per
// second) and the eviction latency ℓ with its deviation σ — so that eviction
// starts early enough to keep ahead of demand, in the style of Hermit's
// feedback-directed reclamation (Qiao et al., NSDI '23):
//
//	D'      = max(D, Dpeak)
//	reserve = clamp(Margin · D' · (ℓ + 4σ), Headroom, MaxReserve)
//	reserve = MaxReserve when D' · ℓ ≥ 1 (demand outpaces the reclaimer)
//
// where Dpeak is the highest windowed demand of the last millisecond, so
// that the reserve is sized for the latest burst rather than the average.
// With one page evicted at a time, 1/ℓ is the measured eviction throughput
// E: the second rule reads "demand outpaces eviction" (D' ≥ E).
//
// The background reclaimer runs while usage exceeds Frames − reserve, at
// most Fastswap's 2048 pages per batch. The reserve never falls below the
// host's headroom, so Glitter never evicts later than Fastswap, and it only
// adapts once the working set has been seen not to fit (evict.State's
// Pressure). Direct reclaim is Fastswap's.
//
// Network (Marker, Rules): every write-back carries the host's urgency, a
// quantised time to blocking, free frames ÷ demand rate; the switches map it
// to an egress priority (p4/farmem), so that evictions of hosts near
// blocking are not stuck behind less urgent traffic, and demand fetches —
// which an application waits on — go first, as Canvas isolates and
// prioritises swap traffic (Wang et al., NSDI '23).
package glitter

import (
	"math"
	"time"

	"github.com/tracebed/tracebed/p4/farmem"
	"github.com/tracebed/tracebed/systems/evict"
	"github.com/tracebed/tracebed/systems/fastswap"
)

// Params tune Glitter (all page counts at full scale).
type Params struct {
	// MaxReserve bounds the reserve (default 8192: four times Fastswap's
	// offload range).
	MaxReserve int `yaml:"max_reserve"`
	// Margin multiplies the demand expected during one eviction (default 2).
	Margin float64 `yaml:"margin"`
	// UrgencyBase is the time to blocking below which a write-back gets
	// urgency 6 (default 10µs, about one write-back on an idle 100 Gbps
	// leaf-spine); each doubling of it lowers the urgency by one, down to 1.
	UrgencyBase time.Duration `yaml:"urgency_base"`
}

// Defaults.
const (
	DefaultMaxReserve  = 4 * fastswap.MaxReclaimOffload
	DefaultMargin      = 2
	DefaultUrgencyBase = 10 * time.Microsecond
)

func (p Params) withDefaults() Params {
	if p.MaxReserve <= 0 {
		p.MaxReserve = DefaultMaxReserve
	}
	if p.Margin <= 0 {
		p.Margin = DefaultMargin
	}
	if p.UrgencyBase <= 0 {
		p.UrgencyBase = DefaultUrgencyBase
	}
	return p
}

// Engine is Glitter's adaptive eviction threshold. It implements
// evict.Engine.
type Engine struct {
	batch, max int
	margin     float64
}

// NewEngine returns the engine with page counts divided by memScale.
func NewEngine(p Params, memScale float64) *Engine {
	p = p.withDefaults()
	return &Engine{
		batch:  fastswap.Scaled(fastswap.MaxReclaimOffload, memScale),
		max:    fastswap.Scaled(p.MaxReserve, memScale),
		margin: p.Margin,
	}
}

// Reserve returns the number of free frames the engine keeps.
func (e *Engine) Reserve(s *evict.State) int {
	headroom := s.Frames - s.Limit
	hi := max(e.max, headroom)
	lead := (s.EvictLatency + 4*s.EvictLatencyDev).Seconds()
	d := max(s.DemandRate, s.DemandPeak)
	if d*s.EvictLatency.Seconds() >= 1 {
		return hi // demand outpaces the reclaimer: hold as much as allowed
	}
	need := int(math.Ceil(e.margin * d * lead))
	return min(max(need, headroom), hi)
}

// Background implements evict.Engine.
func (e *Engine) Background(s *evict.State) int {
	threshold := s.Frames - s.Limit // Fastswap's trigger until pressure is seen
	if s.Pressure {
		threshold = e.Reserve(s)
	}
	if over := s.Used - (s.Frames - threshold); over > 0 {
		return min(over, e.batch)
	}
	return 0
}

// Direct implements evict.Engine: Fastswap's direct reclaim.
func (e *Engine) Direct(*evict.State) int { return e.batch }

// Marker sets the urgency of write-backs. It implements evict.Marker.
type Marker struct {
	base float64 // seconds
}

// NewMarker returns the marker.
func NewMarker(p Params) Marker {
	return Marker{base: p.withDefaults().UrgencyBase.Seconds()}
}

// Urgency implements evict.Marker: 7 when the host is blocked or has no
// free frame; otherwise 6 when the time to blocking (free frames ÷ demand
// rate) is below the base, one less per doubling, and 1 at 16 bases or more
// (or with no demand).
func (m Marker) Urgency(s *evict.State) uint8 {
	free := s.Free()
	if s.Blocked || free <= 0 {
		return farmem.MaxUrgency
	}
	if s.DemandRate <= 0 {
		return 1
	}
	ratio := float64(free) / s.DemandRate / m.base
	u := 6
	for limit := 1.0; ratio >= limit && u > 1; limit *= 2 {
		u--
	}
	return uint8(u)
}

// Rules are Glitter's switch rules: demand fetches (read requests and their
// data responses) at priority 7; a write-back and its acknowledgement at the
// priority equal to its urgency. Urgency 0 (none) is left to the default
// action, the DSCP class.
func Rules() []farmem.Rule {
	r := []farmem.Rule{{Type: farmem.TypeRead, Urgency: 0, Priority: 7}, {Type: farmem.TypeData, Urgency: 0, Priority: 7}}
	for u := uint8(1); u <= farmem.MaxUrgency; u++ {
		r = append(r, farmem.Rule{Type: farmem.TypeWrite, Urgency: u, Priority: u}, farmem.Rule{Type: farmem.TypeAck, Urgency: u, Priority: u})
	}
	return r
}
