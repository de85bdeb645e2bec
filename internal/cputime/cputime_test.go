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

// TestMinorFaultsCountsNewMemory touches memory new to the process: where
// the system counts faults, the count must not go backwards, and grows.
func TestMinorFaultsCountsNewMemory(t *testing.T) {
	start := MinorFaults()
	if start < 0 {
		t.Skip("the system does not count page faults")
	}
	b := make([]byte, 64<<20)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	if d := MinorFaults() - start; d <= 0 {
		t.Errorf("%d faults after touching 64 MiB of new memory", d)
	}
}
