//go:build !linux || nonetns

package labs

// removeRun does nothing: no run comes up on this system (needRoot skips
// the parts of the labs that bring one up).
func removeRun(string) {}
