package cputime

import "testing"

// TestProcessAdvances burns some CPU and checks the clock moved forward
// and never backwards: no bound on how much, which depends on the machine.
func TestProcessAdvances(t *testing.T) {
	start := Process()
	x := uint64(1)
	for i := range 50_000_000 {
		x = x*6364136223846793005 + uint64(i)
	}
	if x == 0 {
		t.Log("unlikely")
	}
	if d := Since(start); d <= 0 {
		t.Errorf("CPU time did not advance over a busy loop: %v", d)
	}
}
