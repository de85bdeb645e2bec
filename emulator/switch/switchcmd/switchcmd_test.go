//go:build linux && !nonetns

package switchcmd

import (
	"strings"
	"testing"

	"github.com/tracebed/tracebed/emulator/internal/testplane"
	"github.com/tracebed/tracebed/emulator/netns"
)

// TestStartRefusesInChild: a process started as a switch that runs
// something else instead (a test binary without Main in its TestMain)
// does not start switches itself, which would recurse.
func TestStartRefusesInChild(t *testing.T) {
	t.Setenv(ChildEnv, "1")
	_, err := Start(&netns.Network{}, Options{})
	if err == nil || !strings.Contains(err.Error(), "switchcmd.Main") {
		t.Errorf("Start in a switch child: %v", err)
	}
}

func TestCommandErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--name", "tor", "--grpc", "/tmp/x.sock"},
		{"--topology", "star", "--name", "tor", "--grpc", "0.0.0.0:9559"},
		{"--topology", "nosuch.yaml", "--name", "tor", "--grpc", "/tmp/x.sock"},
		{"--topology", "star", "--name", "tor", "--grpc", "/tmp/x.sock", "--spin", "fast"},
		{"--topology", "star", "--name", "tor", "--grpc", "/tmp/x.sock", "--program", "nosuch"},
	} {
		cmd := Command(&strings.Builder{}, testplane.Registry)
		cmd.SetArgs(args)
		cmd.SilenceErrors, cmd.SilenceUsage = true, true
		if err := cmd.Execute(); !IsInputError(err) {
			t.Errorf("%q: %v, want an input error", args, err)
		}
	}
}
