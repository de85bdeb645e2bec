// Package cputime reads the CPU time of the process, the measure that
// tracebed's benchmarks divide by: on a machine that other work shares, a
// rate per CPU-second stays put where one per wall-clock second does not.
package cputime

import "time"

// Process returns the CPU time (user and system, all threads: the garbage
// collector's too) that the process has used so far, or the wall-clock
// time since the process started where the system does not say.
func Process() time.Duration { return process() }

// Since returns the CPU time the process has used since Process returned
// start.
func Since(start time.Duration) time.Duration { return Process() - start }

// MinorFaults returns the page faults the process has taken that needed no
// I/O — mostly first touches of memory new to it — or -1 where the system
// does not say. A benchmark reports them beside its CPU time: on a virtual
// machine a first touch can cost tens of microseconds.
func MinorFaults() int64 { return minorFaults() }
