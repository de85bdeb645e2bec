//go:build !linux && !darwin

package memtrace

import "time"

// cpuTime is not measured here; benchmarks report wall-clock rates only.
func cpuTime() time.Duration { return 0 }
