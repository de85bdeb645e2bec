package emulator

import (
	"errors"
	"strings"
	"testing"
)

func TestNeedsLinux(t *testing.T) {
	err := NeedsLinux("'tracebed topo up'")
	if !errors.Is(err, errors.ErrUnsupported) {
		t.Error("does not match errors.ErrUnsupported")
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "'tracebed topo up' needs Linux") || !strings.Contains(msg, "sim substrate") || strings.Count(msg, ".") > 0 {
		t.Errorf("not one clear sentence: %q", msg)
	}
}
