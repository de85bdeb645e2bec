package memtrace

import (
	"errors"
	"testing"
)

// TestScan: a scan ends at the source's end (done), past its budget, or
// at stop's or fn's error, and counts what it read.
func TestScan(t *testing.T) {
	acc := make([]Access, 10000)
	errStop, errFn := errors.New("stop"), errors.New("fn")
	for _, tc := range []struct {
		name     string
		budget   uint64
		stop, fn error
		n        uint64
		done     bool
		err      error
	}{
		{"to the end", 1 << 20, nil, nil, 10000, true, nil},
		{"budget exactly the length: the end is seen", 10000, nil, nil, 10000, true, nil},
		{"past the budget", 5000, nil, nil, 8192, false, nil},
		{"stopped", 1 << 20, errStop, nil, 0, false, errStop},
		{"fn fails", 1 << 20, nil, errFn, 4096, false, errFn},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stop func() error
			if tc.stop != nil {
				stop = func() error { return tc.stop }
			}
			var seen uint64
			n, done, err := Scan(NewSliceSource(acc), tc.budget, stop, func(b []Access) error {
				seen += uint64(len(b))
				return tc.fn
			})
			if n != tc.n || done != tc.done || !errors.Is(err, tc.err) || (tc.fn == nil && seen != n) {
				t.Errorf("Scan = %d, %v, %v (fn saw %d); want %d, %v, %v", n, done, err, seen, tc.n, tc.done, tc.err)
			}
		})
	}
}
