// Package evict is the contract between a paging host (package
// workloads/farmem/paging) and the eviction policies under study (packages
// systems/fastswap and systems/glitter).
//
// A host has Frames local page frames. The application may use Limit of them
// as its share of local memory (the local memory ratio times its working
// set; Fastswap's memory.high); the remaining Headroom frames are the slack
// a background reclaimer works in. A page fault or a first touch needs a free
// frame; when none is free the application blocks and reclaims pages itself
// (direct reclaim). A policy is two decisions, asked by the host on its own
// goroutine:
//
//   - Engine: when the background reclaimer evicts and how many pages, and
//     how many pages the application reclaims when it blocks;
//   - Marker: the urgency an eviction carries in its packets, which the
//     switches may map to an egress priority (p4/farmem).
//
// Policies see the host only through State: measured rates and latencies,
// never the page table.
package evict

import "time"

// State is what a host tells its policy. Page counts are in frames.
type State struct {
	Now time.Duration
	// Limit is the application's share of local memory, in pages.
	Limit int
	// Frames is the number of frames the host may fill: Limit plus the
	// reclaimer's headroom. A demand that finds all of them used blocks.
	Frames int
	// Used counts frames holding a page: resident, being fetched, or being
	// written back.
	Used int
	// Evicting counts the pages being evicted (victims picked, their frames
	// not yet free: dirty ones wait for the write's acknowledgement).
	Evicting int
	// Pressure is set once usage has exceeded Limit: the working set does
	// not fit, and eviction is part of the application's life from then on.
	Pressure bool
	// Blocked is set while the application waits for a free frame.
	Blocked bool
	// DemandRate is the rate at which the application needs frames (page
	// faults and first touches), in pages per second: an exponentially
	// weighted moving average over windows of the host's measuring period.
	DemandRate float64
	// DemandPeak is the highest windowed demand rate of the host's peak
	// horizon (PeakHorizon unless the host is configured otherwise, e.g. at
	// an experiment's scale): the rate of the latest burst.
	DemandPeak float64
	// EvictLatency is the mean time from picking a victim to its frame
	// being free (for a dirty page: the write-back's round trip), and
	// EvictLatencyDev its mean deviation, as TCP estimates a round trip
	// (RFC 6298). Zero until the first eviction.
	EvictLatency, EvictLatencyDev time.Duration
}

// PeakHorizon is how far back DemandPeak looks, by default (paper scale).
const PeakHorizon = time.Millisecond

// Free returns the number of free frames.
func (s *State) Free() int { return s.Frames - s.Used }

// Engine decides when and how much a host evicts. The State its methods
// get is valid during the call only: a host reuses it.
type Engine interface {
	// Background returns how many pages the background reclaimer should
	// evict now, 0 to stay idle. The host asks whenever its memory state
	// changes while the reclaimer is idle, and again whenever the reclaimer
	// has evicted the pages of its last answer.
	Background(s *State) int
	// Direct returns how many pages the application reclaims itself (at
	// least 1) when it needs a frame and none is free. The application stays
	// blocked until it has evicted them.
	Direct(s *State) int
}

// Marker decides the urgency an eviction carries: 0 (none) to 7 (the sender
// is blocked). The host asks when it sends or resends a write-back. Like
// Engine's, the State is valid during the call only.
type Marker interface {
	Urgency(s *State) uint8
}

// NoUrgency is the Marker of systems that carry none.
type NoUrgency struct{}

// Urgency implements Marker.
func (NoUrgency) Urgency(*State) uint8 { return 0 }
