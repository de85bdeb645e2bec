//go:build !linux

package main

// superviseCrashes supervises nothing outside Linux: without a parent-death
// signal a monitor could leave its child behind. A panic in the command's
// goroutine or in a run is still an internal error (exit 1); a fatal
// runtime error exits 2 (docs/reliability.md).
func superviseCrashes(args []string) (int, bool) { return 0, false }
