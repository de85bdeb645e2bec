package rdma

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tracebed/tracebed/analysis"
	"github.com/tracebed/tracebed/emulator/netns"
	"github.com/tracebed/tracebed/emulator/roce/tsharkcheck"
	"github.com/tracebed/tracebed/emulator/switch/switchcmd"
	"github.com/tracebed/tracebed/emulator/testbed"
	"github.com/tracebed/tracebed/emulator/testbed/netnstb"
	"github.com/tracebed/tracebed/experiments"
	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/p4/programs"
)

func TestMain(m *testing.M) {
	switchcmd.Main(programs.Registry) // the Go switches of the netns testbeds are this binary
	os.Exit(netns.RunTests(m, netnsPrefix))
}

// netnsPrefix starts the run ids of this test binary's testbeds.
var netnsPrefix = "r" + netns.NewRunID()[:2]

// TestReadySpec runs experiments/roce-demo.yaml as the default suite does:
// every run moves the whole buffer, message by message, checked in place;
// loss costs retransmissions; the same seed gives the same results.
func TestReadySpec(t *testing.T) {
	spec, err := experiments.Open("roce-demo", nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := experiments.NewRegistry(Kind{})
	exp, err := reg.Compile(spec)
	if err != nil {
		t.Fatal(err)
	}
	res, err := experiments.Execute(context.Background(), spec, exp, experiments.Options{})
	if err != nil {
		t.Fatal(err)
	}
	byRun := map[string]analysis.Metrics{}
	for _, r := range res.Runs {
		byRun[r.Scenario+"/"+r.Policy] = r.Metrics
		if r.Metrics["integrity_errors"] != 0 || r.Metrics["delivered_messages"] != 16 {
			t.Errorf("%s/%s: %v", r.Scenario, r.Policy, r.Metrics)
		}
	}
	for _, pol := range []string{"write_imm", "send", "read"} {
		clean, lossy := byRun["clean/"+pol], byRun["loss-5pct/"+pol]
		if clean["overhead_pct"] != 0 || clean["goodput_gbps"] < 95 {
			t.Errorf("%s on a clean link: %v", pol, clean)
		}
		if lossy["overhead_pct"] <= 0 || lossy["goodput_gbps"] >= clean["goodput_gbps"] {
			t.Errorf("%s at 5%% loss: %v, and clean: %v", pol, lossy, clean)
		}
	}
	again, err := experiments.Execute(context.Background(), spec, exp, experiments.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := res.Marshal()
	b, _ := again.Marshal()
	if !bytes.Equal(a, b) {
		t.Error("the same spec and seed gave different results")
	}
}

// TestMoveProperty moves buffers of random sizes in random messages, MTUs,
// windows and depths, with every verb, under 0, 1 and 5% of loss,
// duplication and reordering: every run must deliver every message once,
// in order, in place (Move checks, and fails on the first slip).
func TestMoveProperty(t *testing.T) {
	cases := 24
	if testing.Short() {
		cases = 8
	}
	r := rand.New(rand.NewPCG(7, 7))
	for i := range cases {
		p := DefaultParams
		p.Bytes = units.Bytes(1 + r.IntN(3<<20))
		p.Message = units.Bytes(1 + r.IntN(int(p.Bytes)))
		if r.IntN(3) == 0 {
			p.Message = units.Bytes(1 + r.IntN(64<<10))
		}
		for p.Bytes/p.Message > 512 {
			p.Message *= 2
		}
		p.MTU = []int{256, 512, 1024, 2048, 4096}[r.IntN(5)]
		p.Window = []int{1, 8, 64, 256}[r.IntN(4)]
		p.Outstanding = 1 + r.IntN(8)
		imp := []units.Fraction{0, 0.01, 0.05}[i%3]
		p.Loss, p.Duplicate, p.Reorder = imp, imp*units.Fraction(r.IntN(2)), imp*units.Fraction(r.IntN(2))
		p.Rate = []units.Rate{10 * units.Gbps, 100 * units.Gbps}[r.IntN(2)]
		verb := verbs[r.IntN(len(verbs))]
		name := fmt.Sprintf("%d-%s-%v-msg%v-mtu%d-win%d-out%d-loss%v-dup%v-reo%v", i, verb, p.Bytes, p.Message, p.MTU, p.Window, p.Outstanding, p.Loss, p.Duplicate, p.Reorder)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			o, err := Move(context.Background(), experiments.SimTestbed, p, verb, uint64(i+1), nil)
			if err != nil {
				t.Fatal(err)
			}
			if o.IntegrityErrors != 0 {
				t.Fatalf("%d integrity errors: %s", o.IntegrityErrors, o.FirstError)
			}
		})
	}
}

// capturing wraps a testbed factory: every testbed it builds records
// ports into dir, one pcapng per port; stops gathers what ends them.
func capturing(newTB experiments.TestbedFactory, dir string, ports []string, stops *[]func() error) experiments.TestbedFactory {
	return func(ctx context.Context, cfg testbed.Config) (testbed.Testbed, error) {
		tb, err := newTB(ctx, cfg)
		if err != nil {
			return nil, err
		}
		for _, p := range ports {
			f, err := os.Create(filepath.Join(dir, p+".pcapng"))
			if err != nil {
				return nil, err
			}
			node, n, _ := strings.Cut(p, "-")
			num, _ := strconv.Atoi(n)
			stop, err := tb.(testbed.Capturer).Capture(node, num, f)
			if err != nil {
				tb.Close()
				return nil, err
			}
			*stops = append(*stops, func() error { err := stop(); f.Close(); return err })
		}
		return tb, nil
	}
}

// checkCaptures decodes every capture with tshark's InfiniBand dissector.
func checkCaptures(t *testing.T, dir string, ports []string, wantOps ...int) {
	t.Helper()
	for _, p := range ports {
		rep, err := tsharkcheck.Check(context.Background(), filepath.Join(dir, p+".pcapng"))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %v", p, rep)
		if !rep.OK() || rep.RoCE == 0 {
			t.Errorf("%s: %v", p, rep)
		}
		for _, op := range wantOps {
			if rep.Opcodes[op] == 0 {
				t.Errorf("%s: no packet of opcode %d", p, op)
			}
		}
	}
}

// TestCaptureTshark is the interoperability check on sim: a capture of the
// switch port towards h2 in a lossy, duplicating, reordering run decodes in tshark
// as RoCEv2 with no malformed packet, and every ICRC recomputed from the
// captured bytes is right.
func TestCaptureTshark(t *testing.T) {
	if _, err := tsharkcheck.Tshark(); err != nil {
		t.Skip(err)
	}
	for _, verb := range []string{VerbWriteImm, VerbSend, VerbRead} {
		t.Run(verb, func(t *testing.T) {
			p := DefaultParams
			p.Bytes, p.Message, p.MTU, p.Window = 128<<10, 32<<10, 1024, 32
			p.Loss, p.Duplicate, p.Reorder = 0.02, 0.02, 0.02
			dir := t.TempDir()
			ports := []string{"tor-2"} // both directions of h2's link
			var stops []func() error
			o, err := Move(context.Background(), capturing(experiments.SimTestbed, dir, ports, &stops), p, verb, 3, nil)
			for _, s := range stops {
				if serr := s(); serr != nil {
					t.Fatal(serr)
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			if o.IntegrityErrors != 0 {
				t.Fatal(o.FirstError)
			}
			// 0x11 ACK (and NAKs); data opcodes per verb.
			want := map[string][]int{VerbWriteImm: {0x06, 0x07, 0x09, 0x11}, VerbSend: {0x00, 0x01, 0x02, 0x11}, VerbRead: {0x0c, 0x0d, 0x0e, 0x0f}}[verb]
			checkCaptures(t, dir, ports, want...)
		})
	}
}

// TestNetns moves a buffer between two real hosts — UDP sockets on port
// 4791 in their namespaces, the Go switch losing, duplicating and
// reordering 1% of the frames — with every verb, and checks it arrived
// exactly once, in order, in place. A capture of h1's interface (frames
// as Linux's UDP stack built them) must satisfy tshark and the ICRC check:
// the IPv4 header fields the ICRC covers are the ones the devices assume.
func TestNetns(t *testing.T) {
	if err := netnstb.Check(netnstb.Options{}); err != nil {
		t.Skipf("netns: skipped: %v", err)
	}
	if testing.Short() {
		t.Skip("netns: skipped in -short mode")
	}
	for _, verb := range []string{VerbWriteImm, VerbSend, VerbRead} {
		t.Run(verb, func(t *testing.T) {
			p := DefaultParams
			p.Bytes, p.Message = 2<<20, 256<<10
			p.Rate = 100 * units.Mbps
			p.Delay = units.Duration(50 * time.Microsecond)
			p.Window = 16
			// The local ACK timeout must exceed a message's time on the
			// wire (256 KiB at 100 Mbps: 21 ms): a READ's responses are
			// progress only in order, so a retried READ waits behind the
			// rest of the first one's responses, and a shorter timeout
			// retries it again until the retry count runs out, as an RNIC
			// configured so would.
			p.Timeout = units.Duration(100 * time.Millisecond)
			p.Loss, p.Duplicate, p.Reorder = 0.01, 0.01, 0.01
			factory := netnstb.NewFactory(netnstb.Options{RunIDPrefix: netnsPrefix})
			defer factory.Close()
			dir := keepDir(t, verb)
			var stops []func() error
			ports := []string{"h1-1"}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			o, err := Move(ctx, capturing(factory.New, dir, ports, &stops), p, verb, 5, nil)
			for _, s := range stops {
				s() // the testbed's Close stopped them already
			}
			if err != nil {
				t.Fatal(err)
			}
			if o.IntegrityErrors != 0 {
				t.Fatal(o.FirstError)
			}
			t.Logf("%s: %.3f Gbps, %d packets, %.1f%% overhead, %d timeouts, %d sequence NAKs, %d duplicates", verb,
				float64(p.Bytes)*8/o.Completion.Seconds()/1e9, o.Packets, 100*(float64(o.DataPackets)/float64(o.MinDataPackets)-1), o.Timeouts, o.SeqNAKs, o.Duplicates)
			if _, err := tsharkcheck.Tshark(); err != nil {
				t.Log("capture not checked:", err)
				return
			}
			checkCaptures(t, dir, ports)
		})
	}
}

// keepDir is where a test writes its captures: a temporary directory, or
// $TRACEBED_KEEP_CAPTURES/<name> to look at them afterwards.
func keepDir(t *testing.T, name string) string {
	if d := os.Getenv("TRACEBED_KEEP_CAPTURES"); d != "" {
		dir := filepath.Join(d, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	return t.TempDir()
}

func TestCompileErrors(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"verb", "policies: [fly]", `policies[0].verb: "fly"`},
		{"mtu", "workload: {mtu: 1000}\npolicies: [send]", "workload.mtu: 1000"},
		{"message", "workload: {bytes: 1KiB, message: 2KiB}\npolicies: [send]", "workload.message"},
		{"loss", "policies: [send]\nscenarios: [{name: x, loss: 60%}]", "scenarios[0].loss"},
		{"topology", "topology: star\npolicies: [send]", "topology"},
		{"too slow", "workload: {rate: 1Mbps}\npolicies: [send]", "workload.rate: 1Mbps moves 16MiB in 2m16"},
		{"window at a slow rate", "workload: {rate: 10Mbps, timeout: 100ms}\npolicies: [send]", "window: 128 packets take 427.008ms"},
		{"timeout", "workload: {rate: 10Mbps, window: 32}\npolicies: [send]", "timeout: 1ms (as an IBTA code"},
	} {
		spec, err := experiments.ParseSpec("x.yaml", []byte("kind: roce-demo\n"+tc.yaml+"\n"), nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		_, err = Kind{}.Compile(spec)
		if err == nil || !bytes.Contains([]byte(err.Error()), []byte(tc.want)) {
			t.Errorf("%s: error %v, want it to mention %q", tc.name, err, tc.want)
		}
	}
}

// TestPaceLimits: at a slow rate, the largest window and the shortest
// timeout Compile accepts (checkPace) move the buffer with every verb;
// what it refuses would fail at run time.
func TestPaceLimits(t *testing.T) {
	y := "kind: roce-demo\nworkload: {bytes: 1MiB, message: 256KiB, rate: 10Mbps, window: %d, timeout: %s}\npolicies: [write_imm, send, read]\n"
	for _, tc := range []struct {
		window  int
		timeout string
		ok      bool
	}{
		{44, "60ms", true},  // the largest window at 10Mbps, and its smallest timeout (ACKs every 11 packets)
		{45, "60ms", false}, // window
		{44, "30ms", false}, // timeout
	} {
		spec, err := experiments.ParseSpec("x.yaml", []byte(fmt.Sprintf(y, tc.window, tc.timeout)), nil)
		if err != nil {
			t.Fatal(err)
		}
		exp, err := Kind{}.Compile(spec)
		if (err == nil) != tc.ok {
			t.Fatalf("window %d, timeout %s: compile error %v, want ok %v", tc.window, tc.timeout, err, tc.ok)
		}
		if err != nil {
			continue
		}
		res, err := experiments.Execute(context.Background(), spec, exp, experiments.Options{})
		if err != nil {
			t.Fatalf("window %d, timeout %s: %v", tc.window, tc.timeout, err)
		}
		for _, r := range res.Runs {
			if r.Metrics["delivered_messages"] != 4 || r.Metrics["integrity_errors"] != 0 {
				t.Errorf("%s: %v", r.Policy, r.Metrics)
			}
		}
	}
}
