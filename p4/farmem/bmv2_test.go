package farmem

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tracebed/tracebed/emulator/bmv2/usefiles"
	"github.com/tracebed/tracebed/internal/testproc"
)

// runBmv2Vectors compiles farmem.p4 for bmv2, starts simple_switch on pcap
// files (--use-files) with eight priority queues, installs the vectors'
// routes and rules with simple_switch_CLI, replays the input frames and
// compares every frame out with the Go twin's, port by port, from the
// EtherType on (farmem.p4 does not rewrite Ethernet addresses). Priority is
// observable through the DSCP re-marking.
func runBmv2Vectors(t *testing.T, p4c, sw, cli string, v Vectors) {
	dir := t.TempDir()
	jsonPath := filepath.Join(dir, "farmem.json")
	infoPath := filepath.Join(dir, "farmem.p4info.txtpb")
	src, _ := filepath.Abs("farmem.p4")
	if out, err := testproc.Command(t, p4c, "--p4v", "16", "--p4runtime-files", infoPath, "-o", jsonPath, src).CombinedOutput(); err != nil {
		t.Fatalf("p4c: %v\n%s", err, out)
	}
	checkP4cNames(t, infoPath)

	// Input frames in vector order, one microsecond apart.
	ports := len(v.Hosts)
	var frames []usefiles.Frame
	for _, vec := range v.Vectors {
		b, err := hex.DecodeString(vec.Frame)
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, usefiles.Frame{Port: vec.InPort, Data: b})
	}
	if err := usefiles.WriteInputs(dir, ports, frames, time.Microsecond); err != nil {
		t.Fatal(err)
	}

	thrift := "22090"
	args := []string{"--use-files", "3", "--priority-queues", "8", "--thrift-port", thrift, "--log-console"}
	args = append(args, usefiles.Args(ports)...)
	args = append(args, jsonPath)
	cmd := exec.Command(sw, args...)
	cmd.Dir = dir
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("simple_switch log:\n%s", log.String())
		}
	}()
	time.Sleep(500 * time.Millisecond) // the thrift server comes up before the files are read

	var cmds strings.Builder
	for p := 1; p <= ports; p++ {
		fmt.Fprintf(&cmds, "act_prof_create_member ingress.ecmp ingress.forward %d\n", p)
	}
	for p, h := range v.Hosts {
		ip := netip.MustParseAddr(h)
		fmt.Fprintf(&cmds, "table_indirect_add ingress.ipv4_route %s => %d\n", ip, p) // member p forwards to port p+1
	}
	for _, r := range v.Rules {
		fmt.Fprintf(&cmds, "table_add ingress.farmem_classify ingress.set_priority %d %d => %d\n", r.Type, r.Urgency, r.Priority)
	}
	c := testproc.Command(t, cli, "--thrift-port", thrift)
	c.Stdin = strings.NewReader(cmds.String())
	if out, err := c.CombinedOutput(); err != nil || bytes.Contains(out, []byte("Error")) {
		t.Fatalf("simple_switch_CLI: %v\n%s", err, out)
	}

	// Wait for the output files to settle.
	want := map[int][]string{}
	for _, vec := range v.Vectors {
		for _, o := range vec.Out {
			want[o.Port] = append(want[o.Port], o.Frame)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	var got map[int][]string
	for time.Now().Before(deadline) {
		time.Sleep(time.Second)
		got = readOutputs(t, dir, ports)
		n, m := 0, 0
		for p := range want {
			n += len(want[p])
			m += len(got[p])
		}
		if m >= n {
			break
		}
	}
	for p := 1; p <= ports; p++ {
		if len(got[p]) != len(want[p]) {
			t.Errorf("port %d: %d frames out, want %d", p, len(got[p]), len(want[p]))
			continue
		}
		for i := range want[p] {
			if g, w := got[p][i][24:], want[p][i][24:]; g != w { // skip the MACs (12 bytes, 24 hex digits)
				t.Errorf("port %d frame %d differs from the Go twin's:\n bmv2 %s\n go   %s", p, i, g, w)
			}
		}
	}
}

func readOutputs(t *testing.T, dir string, ports int) map[int][]string {
	frames, err := usefiles.ReadOutputs(dir, ports)
	if err != nil {
		t.Error(err)
	}
	out := map[int][]string{}
	for p, fs := range frames {
		for _, b := range fs {
			out[p] = append(out[p], hex.EncodeToString(b))
		}
	}
	return out
}

// checkP4cNames checks that p4c's P4Info names every object ours does.
func checkP4cNames(t *testing.T, path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{TableClassify, ActionSetPriority, CounterClass, CounterStats, `"` + FieldType + `"`, `"` + FieldUrgency + `"`} {
		if !bytes.Contains(b, []byte(strings.Trim(name, `"`))) {
			t.Errorf("p4c's P4Info has no %s", name)
		}
	}
}
