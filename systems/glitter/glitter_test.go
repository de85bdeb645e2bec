package glitter_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/tracebed/tracebed/p4/farmem"
	"github.com/tracebed/tracebed/systems/evict"
	"github.com/tracebed/tracebed/systems/glitter"
)

func state(used, limit, frames int, d, peak float64, lat, dev time.Duration) *evict.State {
	return &evict.State{Used: used, Limit: limit, Frames: frames, Pressure: used > limit, DemandRate: d, DemandPeak: peak, EvictLatency: lat, EvictLatencyDev: dev}
}

func TestReserve(t *testing.T) {
	e := glitter.NewEngine(glitter.Params{}, 256) // batch 8, max reserve 32
	for _, tc := range []struct {
		name string
		s    *evict.State
		want int
	}{
		{"no demand: Fastswap's headroom", state(100, 100, 108, 0, 0, 10*time.Microsecond, 0), 8},
		{"little demand: headroom", state(100, 100, 108, 50e3, 50e3, 10*time.Microsecond, 0), 8},
		{"burst: 2 × 50k/s × (10 + 4·25)µs = 11", state(100, 100, 108, 5e3, 50e3, 10*time.Microsecond, 25*time.Microsecond), 11},
		{"deviation counts: 2 × 50k/s × (10 + 4·35)µs = 15", state(100, 100, 108, 5e3, 50e3, 10*time.Microsecond, 35*time.Microsecond), 15},
		{"capped: 2 × 90k/s × (10 + 4·20)µs = 16.2 → 17", state(100, 100, 108, 90e3, 0, 10*time.Microsecond, 20*time.Microsecond), 17},
		{"demand outpaces one reclaimer", state(100, 100, 108, 200e3, 0, 10*time.Microsecond, 0), 32},
		{"a burst outpaces it", state(100, 100, 108, 5e3, 1e6, 10*time.Microsecond, 0), 32},
	} {
		if got := e.Reserve(tc.s); got != tc.want {
			t.Errorf("%s: reserve %d, want %d", tc.name, got, tc.want)
		}
	}
	// Background: evict down to Frames − reserve, at most a batch.
	s := state(108, 100, 108, 5e3, 50e3, 10*time.Microsecond, 47500*time.Nanosecond) // reserve 20: threshold 88
	if got := e.Background(s); got != 8 {
		t.Errorf("background %d, want a batch of 8 (20 over the threshold)", got)
	}
	s.Used = 90
	if got := e.Background(s); got != 2 {
		t.Errorf("background %d, want 2", got)
	}
	s.Pressure = false // before the working set is seen not to fit: Fastswap's rule
	if got := e.Background(s); got != 0 {
		t.Errorf("background %d before pressure at 90 of limit 100, want 0", got)
	}
	if got := e.Direct(s); got != 8 {
		t.Errorf("direct %d, want Fastswap's 2048/256 = 8", got)
	}
}

func TestUrgency(t *testing.T) {
	m := glitter.NewMarker(glitter.Params{UrgencyBase: 10 * time.Microsecond})
	for _, tc := range []struct {
		free    int
		demand  float64
		blocked bool
		want    uint8
	}{
		{0, 1e5, false, 7},
		{5, 1e5, true, 7},
		{5, 0, false, 1},
		{1, 1e6, false, 6},      // 1µs to blocking: below one base
		{15, 1e6, false, 5},     // 15µs: [1, 2) bases
		{30, 1e6, false, 4},     // [2, 4)
		{60, 1e6, false, 3},     // [4, 8)
		{120, 1e6, false, 2},    // [8, 16)
		{200, 1e6, false, 1},    // 16 bases or more
		{100000, 1e6, false, 1}, // far away
		{8, 1e5, false, 2},      // 80µs
		{8, 1e4, false, 1},      // 800µs
		{8, 2e6, false, 6},      // 4µs
		{10, 1e6, false, 5},     // exactly one base: not below it
		{2, 1e5, false, 4},      // 20µs
	} {
		s := &evict.State{Frames: 1000, Used: 1000 - tc.free, DemandRate: tc.demand, Blocked: tc.blocked}
		if got := m.Urgency(s); got != tc.want {
			t.Errorf("free %d, demand %g/s, blocked %v: urgency %d, want %d", tc.free, tc.demand, tc.blocked, got, tc.want)
		}
	}
}

func TestRules(t *testing.T) {
	rules := glitter.Rules()
	prio := map[[2]uint8]uint8{}
	for _, r := range rules {
		prio[[2]uint8{uint8(r.Type), r.Urgency}] = r.Priority
	}
	if prio[[2]uint8{uint8(farmem.TypeRead), 0}] != 7 || prio[[2]uint8{uint8(farmem.TypeData), 0}] != 7 {
		t.Error("demand fetches are not at the top priority")
	}
	for u := uint8(1); u <= 7; u++ {
		if prio[[2]uint8{uint8(farmem.TypeWrite), u}] != u || prio[[2]uint8{uint8(farmem.TypeAck), u}] != u {
			t.Errorf("urgency %d is not priority %d", u, u)
		}
	}
	if _, ok := prio[[2]uint8{uint8(farmem.TypeWrite), 0}]; ok {
		t.Error("urgency 0 should be left to the default (DSCP class)")
	}
}

func ExampleRules() {
	for _, r := range glitter.Rules()[:4] {
		fmt.Printf("%s urgency %d → priority %d\n", r.Type, r.Urgency, r.Priority)
	}
	// Output:
	// read urgency 0 → priority 7
	// data urgency 0 → priority 7
	// write urgency 1 → priority 1
	// ack urgency 1 → priority 1
}
