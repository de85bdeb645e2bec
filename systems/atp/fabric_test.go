package atp

import (
	"testing"
	"time"

	"github.com/tracebed/tracebed/systems/inasched"
)

// TestWindowCappedByPool: ATP's window is at most its pool; where the
// capped window makes ATP slower than the ring, the job uses the ring. A
// job across racks shares the smallest memory of its switches.
func TestWindowCappedByPool(t *testing.T) {
	job := inasched.Job{ID: 1, Workers: 4, Switch: "spine1", Lower: []string{"leaf1", "leaf2"},
		CommRing: 15 * time.Millisecond, CommPS: 10 * time.Millisecond, DemandPS: 600, LatencyPS: 30 * time.Microsecond}
	for _, tt := range []struct {
		mem  inasched.Memory
		want int // pool size; 0: the ring
	}{
		{inasched.Memory{"spine1": 4096, "leaf1": 2048, "leaf2": 4096}, 2048},
		{inasched.Memory{"spine1": 4096, "leaf1": 512, "leaf2": 4096}, 512}, // 10 ms × 600/512 < 15 ms
		{inasched.Memory{"spine1": 4096, "leaf1": 256, "leaf2": 4096}, 0},   // 10 ms × 600/256 > 15 ms
		{inasched.Memory{"spine1": 4096, "leaf1": 0, "leaf2": 4096}, 0},
	} {
		s, _ := New(tt.mem, 1)
		s.Admit(0, job)
		b := s.Binding(0, 1)
		if got := map[bool]int{true: b.Size, false: 0}[b.INA()]; got != tt.want {
			t.Errorf("memory %v: %v, want size %d", tt.mem, b, tt.want)
		}
	}
}
