package dynaina

import (
	"testing"
	"time"

	"github.com/tracebed/tracebed/systems/inasched"
)

// TestPlanAcrossSwitches: a job across racks holds one range on its spine
// and its ToRs; rack-local jobs on those ToRs are laid out around it, and
// one on an unrelated ToR is planned on its own; a job for which INA is
// no faster than the ring gets no memory.
func TestPlanAcrossSwitches(t *testing.T) {
	mem := inasched.Memory{"spine1": 400, "leaf1": 400, "leaf2": 400, "leaf3": 400}
	s, err := New(DefaultParams, mem, 1)
	if err != nil {
		t.Fatal(err)
	}
	mk := func(id int, sw string, lower []string, compute time.Duration, useful int) inasched.Job {
		return inasched.Job{ID: id, Workers: 8, Switch: sw, Lower: lower, Compute: compute, Gradient: 1e8,
			CommINA: 10 * time.Millisecond, CommRing: 17 * time.Millisecond, Latency: 20 * time.Microsecond, Demand: 150, Useful: useful}
	}
	s.Admit(0, mk(1, "leaf1", nil, 50*time.Millisecond, 90))
	s.Admit(0, mk(2, "spine1", []string{"leaf1", "leaf2"}, 60*time.Millisecond, 90))
	s.Admit(0, mk(3, "leaf2", nil, 70*time.Millisecond, 90))
	s.Admit(0, mk(4, "leaf3", nil, 80*time.Millisecond, 90))
	s.Admit(0, mk(5, "leaf3", nil, 80*time.Millisecond, 151)) // never useful
	b := map[int]inasched.Binding{}
	for id := 1; id <= 5; id++ {
		b[id] = s.Binding(0, id)
		t.Logf("job %d: %v", id, b[id])
	}
	for _, pair := range [][2]int{{1, 2}, {2, 3}} {
		if b[pair[0]].Overlaps(b[pair[1]]) && b[pair[0]].Pool != b[pair[1]].Pool {
			t.Errorf("jobs %d and %d share a switch and overlap in different pools: %v, %v", pair[0], pair[1], b[pair[0]], b[pair[1]])
		}
	}
	if !b[2].INA() || b[2].Size < 90 {
		t.Errorf("job 2 across racks: %v, want a pool on its tree", b[2])
	}
	if !b[4].INA() || b[4].Base != 0 {
		t.Errorf("job 4 alone on leaf3: %v, want a pool at 0", b[4])
	}
	if b[5].INA() {
		t.Errorf("job 5: %v; INA is slower than the ring for it", b[5])
	}
	for id, x := range b {
		if x.INA() && x.Base+x.Size > 400 {
			t.Errorf("job %d: %v beyond memory", id, x)
		}
	}
}
