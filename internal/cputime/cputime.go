// Package cputime reads the CPU time a process has used (user and system,
// all threads). On a machine shared with other work, rates per CPU-second
// are the stable measure of benchmarks; wall time also measures the
// neighbours.
package cputime

import "time"

// Process returns the CPU time (user and system) this process has used so
// far, or 0 where the system does not say.
func Process() time.Duration { return process() }
