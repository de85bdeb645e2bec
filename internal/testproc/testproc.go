// Package testproc starts the processes of tests — compilers, bmv2,
// valgrind, tracebed itself — each bounded in time, so that a test whose
// process hangs fails after the bound with what the process printed,
// instead of holding its test binary until go test's -timeout.
package testproc

import (
	"context"
	"os/exec"
	"testing"
	"time"
)

// Bound is how long a process of a test may run: far above what any of
// them takes on a loaded machine, so reaching it means a hang.
const Bound = 5 * time.Minute

// Command is exec.Command for a test: the process is killed once Bound has
// passed or the test has ended, and Wait (Run, Output, CombinedOutput)
// returns at most 10 s after that even if a child of the process still
// holds its output open.
func Command(t testing.TB, name string, args ...string) *exec.Cmd {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Bound)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.WaitDelay = 10 * time.Second
	return cmd
}
