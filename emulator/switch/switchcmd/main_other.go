//go:build !linux || nonetns

package switchcmd

// Main returns at once: no switch process starts on this system (the Go
// switch needs Linux), so a test binary is never one. TestMain functions
// call it on every system, as on Linux.
func Main(programs Registry) {}
