package switchml

import (
	"testing"
	"time"

	"github.com/tracebed/tracebed/systems/inasched"
)

// TestTreesAndTheRing: a job across racks takes the same partition on its
// spine and its ToRs; a rack-local job on one of those ToRs takes another;
// a job for which a partition is below its Useful size stays on the ring
// and never waits.
func TestTreesAndTheRing(t *testing.T) {
	mem := inasched.Memory{"spine1": 300, "leaf1": 300, "leaf2": 300}
	s, err := New(Params{Partition: 100}, mem, 1)
	if err != nil {
		t.Fatal(err)
	}
	job := func(id int, sw string, lower []string, useful int) inasched.Job {
		return inasched.Job{ID: id, Workers: 4, Switch: sw, Lower: lower, Demand: 100, Useful: useful}
	}
	s.Admit(0, job(1, "leaf1", nil, 50))
	s.Admit(0, job(2, "spine1", []string{"leaf1", "leaf2"}, 50))
	s.Admit(0, job(3, "leaf2", nil, 50))
	s.Admit(0, job(4, "leaf1", nil, 150)) // INA slower than the ring even at its window
	want := map[int]int{1: 0, 2: 1, 3: 0, 4: -1}
	for id, base := range want {
		b := s.Binding(time.Second, id)
		if base < 0 {
			if b.INA() {
				t.Errorf("job %d: %v, want the ring", id, b)
			}
			continue
		}
		if !b.INA() || b.Base != base*100 || b.Size != 100 {
			t.Errorf("job %d: %v, want partition %d", id, b, base)
		}
	}
	if len(s.waiting) != 0 {
		t.Errorf("waiting %v; a job the ring beats must not wait", s.waiting)
	}
	// Job 2 leaves: its partition is free on every switch of its tree.
	s.Depart(0, 2)
	s.Admit(0, job(5, "spine1", []string{"leaf1", "leaf2"}, 50))
	if b := s.Binding(0, 5); b.Base != 100 {
		t.Errorf("job 5: %v, want partition 1", b)
	}
}
