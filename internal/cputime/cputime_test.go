package cputime

import (
	"testing"
	"time"
)

// TestProcessGrows: CPU time spent spinning shows up, and never goes back.
func TestProcessGrows(t *testing.T) {
	before := Process()
	last := before
	for start := time.Now(); time.Since(start) < 10*time.Second; {
		now := Process()
		if now < last {
			t.Fatalf("CPU time went back: %v then %v", last, now)
		}
		last = now
		if now-before >= 5*time.Millisecond {
			return
		}
	}
	t.Errorf("10 s of spinning used %v of CPU time", last-before)
}
