// Package fastswap is the baseline eviction policy of tracebed's far-memory
// experiments: Fastswap's (Amaro et al., "Can far memory improve job
// throughput?", EuroSys '20), as its kernel patch implements it
// (github.com/clusterfarmem/fastswap, kernel/kernel.patch, mm/memcontrol.c).
//
// Fastswap sets the application's cgroup memory.high to its local memory.
// When a charge takes usage over high by at most MAX_RECLAIM_OFFLOAD (2048)
// pages, it schedules reclaim on a dedicated CPU (FASTSWAP_RECLAIM_CPU),
// which evicts min(excess, 2048) pages and reschedules itself while usage is
// still over high; when usage is further over, the faulting task reclaims
// 2048 pages itself on its way back to user space — direct reclaim: the
// application blocks. Fastswap carries no urgency and does nothing in the
// network.
//
// In tracebed's terms (package evict): Limit is memory.high, the host's
// headroom is the 2048-page offload range (divided by the experiment's
// memory scale), Background returns min(Used − Limit, 2048) and Direct 2048.
package fastswap

import (
	"math"

	"github.com/tracebed/tracebed/p4/farmem"
	"github.com/tracebed/tracebed/systems/evict"
)

// MaxReclaimOffload is Fastswap's MAX_RECLAIM_OFFLOAD: the largest excess
// over memory.high the dedicated reclaimer handles, and the batch each
// reclaim (offloaded or direct) evicts.
const MaxReclaimOffload = 2048

// Params are Fastswap's constants.
type Params struct {
	// OffloadPages is MAX_RECLAIM_OFFLOAD at full scale (default 2048).
	OffloadPages int `yaml:"offload_pages"`
}

// Engine is Fastswap's eviction engine. It implements evict.Engine.
type Engine struct {
	offload int
}

// New returns the engine with p's constants divided by memScale, the factor
// the experiment divides working sets by (1: full scale).
func New(p Params, memScale float64) *Engine {
	if p.OffloadPages <= 0 {
		p.OffloadPages = MaxReclaimOffload
	}
	return &Engine{offload: Scaled(p.OffloadPages, memScale)}
}

// Scaled divides a page count by the memory scale, keeping at least one page.
func Scaled(pages int, memScale float64) int {
	if memScale < 1 || math.IsNaN(memScale) {
		memScale = 1
	}
	return max(1, int(math.Round(float64(pages)/memScale)))
}

// Offload returns the scaled MAX_RECLAIM_OFFLOAD: the host's headroom.
func (e *Engine) Offload() int { return e.offload }

// Background implements evict.Engine: reclaim the excess over memory.high,
// at most MAX_RECLAIM_OFFLOAD pages per work item.
func (e *Engine) Background(s *evict.State) int {
	if over := s.Used - s.Limit; over > 0 {
		return min(over, e.offload)
	}
	return 0
}

// Direct implements evict.Engine: the faulting task reclaims
// MAX_RECLAIM_OFFLOAD pages.
func (e *Engine) Direct(*evict.State) int { return e.offload }

// Rules are Fastswap's switch rules: none. Every far-memory packet keeps its
// DSCP class (0), in one FIFO with all other traffic.
func Rules() []farmem.Rule { return nil }
