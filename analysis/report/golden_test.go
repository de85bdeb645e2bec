package report

import (
	"flag"
	"path/filepath"
	"testing"

	"github.com/tracebed/tracebed/internal/golden"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// checkGolden compares got with testdata/name, or rewrites it with -update.
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	golden.Check(t, filepath.Join("testdata", name), got, *update, "./analysis/report")
}

// sharedData holds the synthetic results files that package analysis's
// tests generate (go test ./analysis -update rewrites them).
const sharedData = "../testdata"
