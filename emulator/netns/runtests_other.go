//go:build !linux || nonetns

package netns

// RunTests runs a test binary's tests (m is its *testing.M) and returns the
// exit code for os.Exit. No network comes up on this system, so there is
// nothing to check afterwards (see the Linux RunTests).
func RunTests(m interface{ Run() int }, prefix string) int { return m.Run() }
