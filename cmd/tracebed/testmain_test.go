package main

import (
	"bytes"
	"os"
	"os/exec"
	"testing"

	"github.com/tracebed/tracebed/emulator/netns"
	"github.com/tracebed/tracebed/emulator/switch/switchcmd"
	"github.com/tracebed/tracebed/internal/testproc"
	"github.com/tracebed/tracebed/p4/programs"
)

// netnsPrefix starts the run ids of this test binary: the package's letter
// and two random characters, so test binaries running at the same time
// (other packages, or other `go test` invocations) check and clean up only
// their own runs.
var netnsPrefix = "c" + netns.NewRunID()[:2]

// TestMain lets the test binary act as the tracebed command (the lifecycle
// tests run it as 'tracebed topo up', whose switches are 'tracebed switch'
// processes of the same binary), and checks after the suite that no
// namespace, link or process of this package's runs is left.
func TestMain(m *testing.M) {
	if os.Getenv("TRACEBED_TEST_AS_MAIN") == "1" {
		os.Exit(mainWith(testApp)) // with the test kinds (reliability_test.go)
	}
	switchcmd.Main(programs.Registry) // the switches of in-process netns runs
	os.Exit(netns.RunTests(m, netnsPrefix))
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: network namespaces need root (CI runs as root)")
	}
}

// tracebed returns the command line of this test binary acting as tracebed.
// It is killed if it runs beyond testproc.Bound or the test ends.
func tracebed(t *testing.T, args ...string) *exec.Cmd {
	c := testproc.Command(t, os.Args[0], args...)
	c.Env = append(os.Environ(), "TRACEBED_TEST_AS_MAIN=1")
	return c
}

func runTracebed(t *testing.T, args ...string) (int, string) {
	t.Helper()
	c := tracebed(t, args...)
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	err := c.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, out.String()
}
