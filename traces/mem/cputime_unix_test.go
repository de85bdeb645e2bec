//go:build linux || darwin

package memtrace

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time this process has used: on a machine shared with
// other work, rates per CPU-second are the stable measure.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(syscall.TimevalToNsec(ru.Utime) + syscall.TimevalToNsec(ru.Stime))
}
