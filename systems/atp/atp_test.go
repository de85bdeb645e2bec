package atp

import (
	"testing"

	"github.com/tracebed/tracebed/systems/inasched"
)

func TestSharedPool(t *testing.T) {
	s, _ := New(inasched.Memory{"tor": 4096, "empty": 0}, 1)
	s.Admit(0, inasched.Job{ID: 1, Workers: 4, Switch: "tor"})
	s.Admit(0, inasched.Job{ID: 2, Workers: 8, Switch: "tor"})
	s.Admit(0, inasched.Job{ID: 3, Workers: 4, Switch: "empty"})
	s.Admit(0, inasched.Job{ID: 4, Workers: 1, Switch: "tor"})
	want := inasched.Binding{Mode: inasched.Shared, Pool: 0, Base: 0, Size: 4096}
	for _, id := range []int{1, 2} {
		if got := s.Binding(0, id); got != want {
			t.Errorf("job %d: %v, want the whole memory shared", id, got)
		}
	}
	for _, id := range []int{3, 4, 99} {
		if got := s.Binding(0, id); got.INA() {
			t.Errorf("job %d: %v, want the ring", id, got)
		}
	}
	s.Depart(1, 1)
	if s.Binding(1, 1).INA() {
		t.Error("departed job still bound")
	}
}
