package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/tracebed/tracebed/emulator/roce/tsharkcheck"
)

// TestRunPcap: run --pcap writes a pcapng per chosen port per run, and
// tshark decodes what a roce-demo run sent as RoCEv2 with right ICRCs;
// a malformed --pcap-port is bad input.
func TestRunPcap(t *testing.T) {
	out, caps := t.TempDir(), t.TempDir()
	code, _, stderr := run(t, "run", "--quiet", "--out", out, "--pcap", caps, "--pcap-port", "tor:2", "testdata/small-roce.yaml")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	path := filepath.Join(caps, "small-roce", "lossy-write_imm-seed1-tor-2.pcapng")
	if st, err := os.Stat(path); err != nil || st.Size() == 0 {
		t.Fatalf("capture: %v", err)
	}
	if code, _, stderr := run(t, "run", "--quiet", "--out", out, "--pcap", caps, "--pcap-port", "tor", "testdata/small-roce.yaml"); code != 2 {
		t.Errorf("--pcap-port tor: exit %d, want 2: %s", code, stderr)
	}
	if _, err := tsharkcheck.Tshark(); err != nil {
		t.Skip(err)
	}
	rep, err := tsharkcheck.Check(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.RoCE == 0 {
		t.Fatalf("tshark: %v", rep)
	}
}
