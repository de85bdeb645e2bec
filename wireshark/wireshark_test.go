package wireshark

import (
	"bytes"
	"fmt"
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

	"github.com/tracebed/tracebed/emulator/frame"
	"github.com/tracebed/tracebed/emulator/netns"
	"github.com/tracebed/tracebed/emulator/switch/switchcmd"
	"github.com/tracebed/tracebed/p4/farmem"
	"github.com/tracebed/tracebed/p4/ina"
	"github.com/tracebed/tracebed/p4/programs"
	"github.com/tracebed/tracebed/topologies"
)

// testPrefix starts the run ids of this test binary (see netns.RunTests).
var testPrefix = "ws" + netns.NewRunID()[:1]

func TestMain(m *testing.M) {
	switchcmd.Main(programs.Registry) // the Go switch of the capture test is this binary
	os.Exit(netns.RunTests(m, testPrefix))
}

// message is a datagram and what the dissector must show of it.
type message struct {
	srcPort, dstPort uint16
	payload          []byte
	fields           string // tshark's -T fields output for fieldList
}

// fieldList are the fields the tests read, in tshark's -e order.
var fieldList = []string{
	"ina.proto", "ina.flags", "ina.flags.data", "ina.flags.result", "ina.flags.retransmit", "ina.job", "ina.slot", "ina.ver",
	"ina.worker", "ina.workers", "ina.k", "ina.round", "ina.offset", "ina.bitmap", "ina.values.sum",
	"farmem.magic", "farmem.type", "farmem.urgency", "farmem.flags.retransmit", "farmem.flags.not_found",
	"farmem.id", "farmem.page", "farmem.page_version", "farmem.sum", "farmem.data_len",
}

// messages are INA and far-memory datagrams built with the Go codecs, each
// with the fields the dissector must decode from it.
func messages() []message {
	values := make([]int32, 64)
	sum := int64(0)
	for i := range values {
		values[i] = int32(i*1000 - 20000)
		sum += int64(values[i])
	}
	page := bytes.Repeat([]byte{0xab}, 4096)
	empty := strings.Repeat("\t", 10)
	var out []message
	inaMsg := func(h ina.Header, src, dst uint16, fields string) {
		out = append(out, message{src, dst, ina.Append(nil, h, values), fields + "\t" + fmt.Sprint(sum) + empty})
	}
	inaMsg(ina.Header{Flags: ina.FlagData, Job: 3, Slot: 17, Ver: 1, Worker: 2, Workers: 4, K: 64, Round: 9, Offset: 4352, Bitmap: 1 << 2},
		40003, ina.Port, "1\t0x01\t1\t0\t0\t3\t17\t1\t2\t4\t64\t9\t4352\t0x00000004")
	inaMsg(ina.Header{Flags: ina.FlagResult | ina.FlagRetransmit, Job: 3, Slot: 17, Ver: 1, Worker: 0, Workers: 4, K: 64, Round: 9, Offset: 4352, Bitmap: 0xf},
		ina.Port, 40003, "1\t0x06\t0\t1\t1\t3\t17\t1\t0\t4\t64\t9\t4352\t0x0000000f")
	inaEmpty := strings.Repeat("\t", 15)
	fm := func(h farmem.Header, data []byte, src, dst uint16, fields string) {
		out = append(out, message{src, dst, h.Append(nil, data), inaEmpty + fields})
	}
	fm(farmem.Header{Type: farmem.TypeRead, ID: 77, Page: 1 << 40}, nil, farmem.HostPort, farmem.Port,
		"0x464d\t1\t0\t0\t0\t77\t1099511627776\t0\t0x00000000\t")
	fm(farmem.Header{Type: farmem.TypeData, ID: 77, Page: 1 << 40, Version: 5, Sum: 0xdeadbeef}, page, farmem.Port, farmem.HostPort,
		"0x464d\t2\t0\t0\t0\t77\t1099511627776\t5\t0xdeadbeef\t4096")
	fm(farmem.Header{Type: farmem.TypeWrite, Urgency: 6, Flags: farmem.FlagRetransmit, ID: 78, Page: 12, Version: 6, Sum: 0x01020304}, page, farmem.HostPort, farmem.Port,
		"0x464d\t3\t6\t1\t0\t78\t12\t6\t0x01020304\t4096")
	fm(farmem.Header{Type: farmem.TypeData, Flags: farmem.FlagNotFound, ID: 79, Page: 13}, nil, farmem.Port, farmem.HostPort,
		"0x464d\t2\t0\t0\t1\t79\t13\t0\t0x00000000\t")
	return out
}

func needTshark(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("tshark"); err != nil {
		t.Skip("skipping: tshark is not installed (apt-get install tshark)")
	}
}

// tshark decodes file with the dissector and returns a line of fieldList
// per UDP packet.
func tshark(t *testing.T, file string) []string {
	t.Helper()
	dir := t.TempDir()
	lua := filepath.Join(dir, File)
	if err := os.WriteFile(lua, Dissector, 0o644); err != nil {
		t.Fatal(err)
	}
	// Not the headers quoted in h2's ICMP port unreachable messages.
	args := []string{"-X", "lua_script:" + lua, "-r", file, "-Y", "(ina || farmem) && !icmp", "-T", "fields", "-E", "separator=/t"}
	for _, f := range fieldList {
		args = append(args, "-e", f)
	}
	c := exec.Command("tshark", args...)
	c.Env = append(os.Environ(), "HOME="+dir) // no user profile
	var stderr bytes.Buffer
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, stderr.String())
	}
	if strings.Contains(stderr.String(), "Lua") {
		t.Errorf("tshark complains about the dissector:\n%s", stderr.String())
	}
	return strings.Split(strings.TrimRight(string(out), "\n"), "\n")
}

func check(t *testing.T, got []string, want []message) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("tshark decoded %d packets, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i, m := range want {
		if got[i] != m.fields {
			g, w := strings.Split(got[i], "\t"), strings.Split(m.fields, "\t")
			for j := range fieldList {
				if j < len(g) && j < len(w) && g[j] != w[j] {
					t.Errorf("packet %d: %s = %q, want %q", i+1, fieldList[j], g[j], w[j])
				}
			}
			if len(g) != len(w) {
				t.Errorf("packet %d: %q, want %q", i+1, got[i], m.fields)
			}
		}
	}
}

// TestDissector decodes frames built by tracebed's codecs, written as
// pcapng, with tshark and the dissector.
func TestDissector(t *testing.T) {
	needTshark(t)
	file := filepath.Join(t.TempDir(), "msgs.pcapng")
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	w, err := pcapgo.NewNgWriter(f, layers.LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	msgs := messages()
	for i, m := range msgs {
		fr := frame.AppendUDP(nil, frame.UDP{
			SrcMAC: topologies.HostMAC(1), DstMAC: topologies.HostMAC(2),
			Src: netip.AddrPortFrom(netip.MustParseAddr("10.0.0.1"), m.srcPort),
			Dst: netip.AddrPortFrom(netip.MustParseAddr("10.0.0.2"), m.dstPort)}, m.payload)
		ci := gopacket.CaptureInfo{Timestamp: time.Unix(int64(i), 0), CaptureLength: len(fr), Length: len(fr), InterfaceIndex: 0}
		if err := w.WritePacket(ci, fr); err != nil {
			t.Fatal(err)
		}
	}
	w.Flush()
	f.Close()
	check(t, tshark(t, file), msgs)
}
