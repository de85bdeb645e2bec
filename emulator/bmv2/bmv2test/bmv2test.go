// Package bmv2test holds what the P4 programs' bmv2 tests share: finding
// the tools, and compiling a program once per change.
package bmv2test

import (
	"context"
	"strings"
	"testing"

	"github.com/tracebed/tracebed/emulator/bmv2"
	"github.com/tracebed/tracebed/emulator/dataplane"
)

// Compile compiles prog with p4c-bm2-ss into the user's cache (one
// compilation per source and compiler version, shared by every test and
// testbed), failing t if it does not compile. It skips t, saying what is
// missing, where p4c-bm2-ss or simple_switch_grpc is not on PATH.
func Compile(ctx context.Context, t testing.TB, prog *dataplane.Program) *bmv2.Program {
	t.Helper()
	if _, err := bmv2.FindTools(bmv2.Options{}); err != nil {
		t.Skipf("skipping: %s", strings.SplitN(err.Error(), "\n", 2)[0])
	}
	compiled, err := bmv2.Compile(ctx, prog, bmv2.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return compiled
}
