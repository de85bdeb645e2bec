package noina

import (
	"testing"

	"github.com/tracebed/tracebed/systems/inasched"
)

func TestAlwaysRing(t *testing.T) {
	s, _ := New(inasched.Memory{"tor": 1 << 20}, 1)
	s.Admit(0, inasched.Job{ID: 1, Workers: 8, Switch: "tor", Demand: 10})
	if b := s.Binding(0, 1); b.INA() || b.Mode != inasched.Ring {
		t.Errorf("binding %v, want ring", b)
	}
	if s.Name() != "noina" {
		t.Error(s.Name())
	}
}
