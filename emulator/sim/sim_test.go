package sim

import (
	"context"
	"slices"
	"testing"
	"time"
)

func TestEventOrder(t *testing.T) {
	s := New()
	var got []int
	s.At(30, func() { got = append(got, 3) })
	s.At(10, func() { got = append(got, 1) })
	s.At(20, func() { got = append(got, 2) })
	s.At(20, func() { got = append(got, 22) }) // same instant: scheduling order
	s.At(10, func() {
		got = append(got, 11)
		s.At(10, func() { got = append(got, 12) }) // scheduled now, for now: after the rest of this instant
	})
	s.Run()
	if want := []int{1, 11, 12, 2, 22, 3}; !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
	if s.Now() != 30 || s.Fired() != 6 {
		t.Fatalf("now %v fired %d", s.Now(), s.Fired())
	}
}

func TestPastIsNow(t *testing.T) {
	s := New()
	var at Time
	s.At(100, func() { s.At(50, func() { at = s.Now() }) })
	s.Run()
	if at != 100 {
		t.Fatalf("event scheduled in the past ran at %v, want 100", at)
	}
}

func TestTimerStop(t *testing.T) {
	s := New()
	fired := 0
	a := s.After(10, func() { fired++ })
	b := s.After(20, func() { fired += 10 })
	s.At(5, func() {
		if !a.Stop() {
			t.Error("Stop of a pending timer returned false")
		}
		if a.Stop() {
			t.Error("second Stop returned true")
		}
	})
	s.Run()
	if fired != 10 || b.Stop() {
		t.Fatalf("fired %d; stopping a fired timer must return false", fired)
	}
}

func TestRunUntil(t *testing.T) {
	s := New()
	n := 0
	for i := range 10 {
		s.At(Time(i)*Microsecond, func() { n++ })
	}
	s.RunUntil(4 * Microsecond)
	if n != 5 || s.Now() != 4*Microsecond {
		t.Fatalf("after RunUntil(4us): %d events, now %v", n, s.Now())
	}
	s.RunUntil(100 * Microsecond)
	if n != 10 || s.Now() != 100*Microsecond {
		t.Fatalf("after RunUntil(100us): %d events, now %v", n, s.Now())
	}
}

func TestStop(t *testing.T) {
	s := New()
	n := 0
	for i := range 10 {
		s.At(Time(i), func() {
			n++
			if n == 3 {
				s.Stop()
			}
		})
	}
	s.Run()
	if n != 3 || s.Pending() != 7 {
		t.Fatalf("ran %d, pending %d", n, s.Pending())
	}
}

// TestHeapProperty schedules many events at pseudo-random times and checks
// they fire sorted by (time, scheduling order).
func TestHeapProperty(t *testing.T) {
	s := New()
	type rec struct {
		at  Time
		seq int
	}
	var fired []rec
	x := uint64(12345)
	for i := range 5000 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		at := Time(x % 1000)
		s.At(at, func() { fired = append(fired, rec{at, i}) })
	}
	s.Run()
	if !slices.IsSortedFunc(fired, func(a, b rec) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		return a.seq - b.seq
	}) {
		t.Fatal("events fired out of (time, seq) order")
	}
}

// TestInterrupt: a loop of events that never ends (each event schedules
// the next at the same instant, so no time limit helps) returns soon after
// Interrupt is called from another goroutine, and keeps returning.
func TestInterrupt(t *testing.T) {
	s := New()
	var loop func()
	loop = func() { s.At(s.Now(), loop) }
	s.At(0, loop)
	ctx, cancel := context.WithCancel(context.Background())
	defer s.InterruptOn(ctx)()
	time.AfterFunc(20*time.Millisecond, cancel)
	s.RunUntil(Forever)
	if !s.Interrupted() || s.Now() != 0 {
		t.Fatalf("interrupted %v at %v", s.Interrupted(), s.Now())
	}
	n := s.Fired()
	s.RunUntil(Second)
	if s.Fired() != n || s.Now() != 0 {
		t.Errorf("an interrupted simulation fired %d more events and moved to %v", s.Fired()-n, s.Now())
	}
}
