package farmem

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
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
	if out, err := exec.Command(p4c, "--p4v", "16", "--p4runtime-files", infoPath, "-o", jsonPath, src).CombinedOutput(); err != nil {
		t.Fatalf("p4c: %v\n%s", err, out)
	}
	checkP4cNames(t, infoPath)

	// Input pcaps, one per port, in vector order (one microsecond apart).
	ports := len(v.Hosts)
	writers := make([]*pcapgo.Writer, ports+1)
	for p := 1; p <= ports; p++ {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("p%d_in.pcap", p)))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		writers[p] = pcapgo.NewWriter(f)
		if err := writers[p].WriteFileHeader(65535, layers.LinkTypeEthernet); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Unix(1700000000, 0)
	for i, vec := range v.Vectors {
		b, _ := hex.DecodeString(vec.Frame)
		ci := gopacket.CaptureInfo{Timestamp: start.Add(time.Duration(i) * time.Microsecond), CaptureLength: len(b), Length: len(b)}
		if err := writers[vec.InPort].WritePacket(ci, b); err != nil {
			t.Fatal(err)
		}
	}

	thrift := "22090"
	args := []string{"--use-files", "3", "--priority-queues", "8", "--thrift-port", thrift, "--log-console"}
	for p := 1; p <= ports; p++ {
		args = append(args, "-i", fmt.Sprintf("%d@p%d", p, p))
	}
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
	c := exec.Command(cli, "--thrift-port", thrift)
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
	out := map[int][]string{}
	for p := 1; p <= ports; p++ {
		f, err := os.Open(filepath.Join(dir, fmt.Sprintf("p%d_out.pcap", p)))
		if err != nil {
			continue
		}
		r, err := pcapgo.NewReader(f)
		if err != nil {
			f.Close()
			continue
		}
		for {
			b, _, err := r.ReadPacketData()
			if errors.Is(err, io.EOF) || err != nil {
				break
			}
			out[p] = append(out[p], hex.EncodeToString(b))
		}
		f.Close()
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
