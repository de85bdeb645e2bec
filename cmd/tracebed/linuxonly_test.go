//go:build !linux || nonetns

package main

import (
	"strings"
	"testing"
)

// TestLinuxOnlyCommands: where the netns code is compiled out (any system
// but Linux, or Linux with -tags nonetns), every command that needs network
// namespaces exits 2 with one sentence saying so and pointing at the sim
// substrate, the sim substrate runs, and exporting a topology still works.
func TestLinuxOnlyCommands(t *testing.T) {
	out := t.TempDir()
	for _, args := range [][]string{
		{"topo", "up", "star"},
		{"topo", "up", "--detach", "leafspine"},
		{"topo", "down"},
		{"topo", "cli"},
		{"cleanup"},
		{"switch", "--topology", "star", "--name", "tor", "--grpc", "/tmp/x.sock"},
		{"mininet", "star"},
		{"run", "--out", out, "dynaina-netns"},
		{"run", "--out", out, "--substrate", "netns"},
	} {
		code, stdout, stderr := run(t, args...)
		if code != 2 || stdout != "" || !strings.Contains(stderr, "needs Linux") || !strings.Contains(stderr, "sim substrate") {
			t.Errorf("tracebed %s: exit %d, stdout %q, stderr %q; want exit 2 and the sentence that it needs Linux", strings.Join(args, " "), code, stdout, stderr)
		}
		if n := strings.Count(strings.TrimSpace(stderr), "\n"); n > 0 {
			t.Errorf("tracebed %s: %d lines on stderr, want one:\n%s", strings.Join(args, " "), n+1, stderr)
		}
	}
	if code, stdout, stderr := run(t, "run", "--quiet", "--plots=false", "--out", out, "testdata/small-incast.yaml"); code != 0 || !strings.Contains(stdout, "small-incast") {
		t.Errorf("run on sim: exit %d, stderr %q", code, stderr)
	}
	if code, stdout, stderr := run(t, "topo", "export", "--format", "mininet", "star"); code != 0 || !strings.Contains(stdout, "addSwitch") {
		t.Errorf("topo export: exit %d, stderr %q", code, stderr)
	}
}
