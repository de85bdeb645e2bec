package farmem

import (
	"errors"
	"strings"
	"testing"

	memtrace "github.com/tracebed/tracebed/traces/mem"
	"github.com/tracebed/tracebed/workloads/farmem/paging"
)

// stream parses "W0 R1 …": a write or read of a page each.
func stream(s string) memtrace.Source {
	var a []memtrace.Access
	for _, f := range strings.Fields(s) {
		a = append(a, memtrace.Access{Page: uint64(f[1] - '0'), Write: f[0] == 'W'})
	}
	return memtrace.NewSliceSource(a)
}

// TestReplayLoad: faults and write-backs of short streams, counted by hand.
func TestReplayLoad(t *testing.T) {
	for _, tc := range []struct {
		name          string
		stream        string
		frames        int
		repl          paging.Replacement
		reads, writes uint64
	}{
		// First touches are no reads; every page is dirty once mapped.
		{"fits", "W0 W1 R0 R1", 2, paging.Clock, 0, 0},
		{"fits, lru", "W0 W1 R0 R1", 2, paging.LRU, 0, 0},
		// A cycle one page longer than the frames misses every time; a
		// page read back is clean until written.
		{"cycle", "W0 W1 W2 R0 R1 R2", 2, paging.LRU, 3, 3},
		{"cycle, clock", "W0 W1 W2 R0 R1 R2", 2, paging.Clock, 3, 3},
		// LRU keeps the page just used (A); clock's hand, having cleared
		// both reference bits, takes A, which is read back next.
		{"recency, lru", "W0 W1 R0 R2 R0", 2, paging.LRU, 0, 1},
		{"recency, clock", "W0 W1 R0 R2 R0", 2, paging.Clock, 1, 2},
		// A page written after it was read back is written back again.
		{"rewritten", "W0 W1 R0 W0 W1 R0", 1, paging.LRU, 3, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := replayLoad(stream(tc.stream), 3, tc.frames, tc.repl, 1<<20, nil)
			if err != nil {
				t.Fatal(err)
			}
			if want := uint64(len(strings.Fields(tc.stream))); l.accesses != want || l.reads != tc.reads || l.writes != tc.writes {
				t.Errorf("%+v; want %d accesses, %d reads, %d writes", l, want, tc.reads, tc.writes)
			}
		})
	}
}

// TestReplayLoadLimits: the budget ends the replay, stop's error ends it,
// and a page beyond the working set is an error, not a panic.
func TestReplayLoadLimits(t *testing.T) {
	long := strings.Repeat("W0 W1 W2 ", 4000)
	if l, err := replayLoad(stream(long), 3, 2, paging.Clock, 5000, nil); err != nil || l.accesses < 5000 || l.accesses >= 12000 {
		t.Errorf("budget 5000 of 12000: %+v, %v", l, err)
	}
	errStop := errors.New("stop")
	if _, err := replayLoad(stream(long), 3, 2, paging.LRU, 1<<20, func() error { return errStop }); !errors.Is(err, errStop) {
		t.Errorf("stop: %v; want %v", err, errStop)
	}
	if _, err := replayLoad(stream("W0 W5"), 3, 2, paging.Clock, 1<<20, nil); err == nil || !strings.Contains(err.Error(), "page 5 beyond the working set of 3 pages") {
		t.Errorf("page beyond: %v", err)
	}
}
