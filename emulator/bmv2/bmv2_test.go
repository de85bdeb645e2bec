package bmv2

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tracebed/tracebed/emulator/internal/testplane"
	"github.com/tracebed/tracebed/topologies"
)

func TestFindToolsMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := FindTools(Options{})
	if err == nil {
		t.Fatal("found bmv2 tools on an empty PATH")
	}
	for _, want := range []string{"simple_switch_grpc and p4c-bm2-ss", "not found on PATH", "tutorials", "--switch go"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	// One present, one missing: only the missing one is named.
	dir := t.TempDir()
	fake := filepath.Join(dir, "p4c-bm2-ss")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	_, err = FindTools(Options{})
	if err == nil || !strings.Contains(err.Error(), "needs simple_switch_grpc,") {
		t.Errorf("with p4c-bm2-ss only: %v", err)
	}
	tools, err := FindTools(Options{Switch: fake, Compiler: fake})
	if err != nil || tools.Compiler != fake {
		t.Errorf("explicit paths: %+v, %v", tools, err)
	}
}

func TestSwitchArgs(t *testing.T) {
	top, err := topologies.Open("leafspine")
	if err != nil {
		t.Fatal(err)
	}
	leaf := top.Node("leaf1")
	got := SwitchArgs(leaf, "/run/tracebed/tb-x/leaf1.bmv2.sock", Options{CPUPort: 255, DirectLinks: true})
	want := []string{"--device-id", "1", "-i", "1@eth1", "-i", "2@eth2", "-i", "3@eth3", "-i", "4@eth4", "-i", "5@eth5", "-i", "6@eth6",
		"--log-console", "--log-level", "warn", "--no-p4", "--",
		"--grpc-server-addr", "unix:/run/tracebed/tb-x/leaf1.bmv2.sock", "--cpu-port", "255", "--priority-queues", "8"}
	if !slices.Equal(got, want) {
		t.Errorf("args:\n got %q\nwant %q", got, want)
	}
	got = SwitchArgs(leaf, "/s", Options{LogLevel: "info", SingleQueue: true})
	if slices.Contains(got, "--priority-queues") || slices.Contains(got, "--cpu-port") || !slices.Contains(got, "info") || got[3] != "1@bmv1" {
		t.Errorf("defaults: %q", got)
	}
	if a := CompileArgs("x.p4", "x.json", "x.txtpb"); !slices.Equal(a, []string{"--arch", "v1model", "-o", "x.json", "--p4runtime-files", "x.txtpb", "x.p4"}) {
		t.Errorf("compile args %q", a)
	}
}

// TestCompileNeedsSource: a program without P4 source (the engine's test
// plane) cannot run on bmv2, and Compile says so before looking for p4c.
func TestCompileNeedsSource(t *testing.T) {
	prog := testplane.Program()
	_, err := Compile(context.Background(), &prog, Options{})
	if err == nil || !strings.Contains(err.Error(), "no P4 source") {
		t.Errorf("compile without source: %v", err)
	}
}
