//go:build linux && !nonetns

package mininet

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tracebed/tracebed/emulator/bmv2"
	"github.com/tracebed/tracebed/emulator/internal/testplane"
	"github.com/tracebed/tracebed/emulator/netns"
	"github.com/tracebed/tracebed/emulator/netns/lab"
	"github.com/tracebed/tracebed/emulator/switch/switchcmd"
	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/topologies"
)

// testPrefix starts the run ids of this test binary (see netns.RunTests).
var testPrefix = "mn" + netns.NewRunID()[:1]

func TestMain(m *testing.M) {
	switchcmd.Main(testplane.Registry) // TracebedSwitch starts this binary as 'switch'
	os.Exit(netns.RunTests(m, testPrefix))
}

func needMininet(t *testing.T) string {
	t.Helper()
	py, err := Python()
	if err != nil {
		t.Skipf("skipping: %v", err)
	}
	return py
}

// TestHelperCompiles checks the helper module and a generated script with
// Python's compiler, and that BMv2Switch's command line is the one
// emulator/bmv2 gives simple_switch_grpc.
func TestHelperCompiles(t *testing.T) {
	py := needMininet(t)
	dir := t.TempDir()
	top, err := topologies.Open("leafspine")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, HelperFile), Helper, 0o644)
	os.WriteFile(filepath.Join(dir, "leafspine.py"), Export(top), 0o644)
	if out, err := exec.Command(py, "-m", "py_compile", filepath.Join(dir, HelperFile), filepath.Join(dir, "leafspine.py")).CombinedOutput(); err != nil {
		t.Fatalf("py_compile: %v\n%s", err, out)
	}
	// BMv2Switch.command() for leaf1, without a network: its ports from
	// the topology.
	prog := fmt.Sprintf(`
import sys
sys.path.insert(0, %q)
import tracebed_mininet as tm
class Intf:
    def __init__(self, name): self.name = name
class Args:
    simple_switch_grpc = 'simple_switch_grpc'
    bmv2_log_level = 'warn'
class Run:
    args = Args()
s = tm.BMv2Switch.__new__(tm.BMv2Switch)
s.run, s.socket = Run(), '/x/leaf1.bmv2.sock'
s.params = {'tb_queues': %d}
intfs = [Intf(n) for n in sys.argv[1:]]
s.ports = dict((i, k + 1) for k, i in enumerate(intfs))
s.intfList = lambda: intfs
print(' '.join(s.command()))
`, dir, top.Node("leaf1").Queues)
	sw := top.Node("leaf1")
	args := []string{"-c", prog}
	for _, p := range sw.Ports {
		args = append(args, p.Iface)
	}
	out, err := exec.Command(py, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	// BMv2Switch attaches bmv2 to Mininet's links themselves: no link
	// stage (docs/bmv2.md); its ports have the topology's queues.
	want := "simple_switch_grpc " + strings.Join(bmv2.SwitchArgs(sw, "/x/leaf1.bmv2.sock", bmv2.Options{DirectLinks: true}), " ")
	if got := strings.TrimSpace(string(out)); got != want {
		t.Errorf("BMv2Switch runs\n  %s\nemulator/bmv2 runs\n  %s", got, want)
	}
}

// star3 is a star of three hosts on 100 Mbit/s links.
func star3(t *testing.T) *topologies.Topology {
	t.Helper()
	f, err := topologies.Generate(topologies.Params{Generate: "star", Hosts: 3, Rate: 100 * units.Mbps})
	if err != nil {
		t.Fatal(err)
	}
	top, err := f.Build("star3")
	if err != nil {
		t.Fatal(err)
	}
	return top
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: Mininet needs root (CI runs as root)")
	}
}

// rootLinks returns the names of the links in the root namespace.
func rootLinks(t *testing.T) map[string]bool {
	t.Helper()
	ls, err := netns.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, l := range ls {
		out[l.Attrs().Name] = true
	}
	return out
}

// checkNothingLeft checks that nothing of run p is left: tracebed's
// objects (netns.CheckClean), Mininet's node shells and Python process,
// interfaces of the topology or in Mininet's naming in the root namespace.
func checkNothingLeft(t *testing.T, p *Process, top *topologies.Topology, before map[string]bool) {
	t.Helper()
	if err := netns.CheckClean(p.RunID); err != nil {
		t.Error(err)
	}
	for node, pid := range p.Nodes {
		if lab.Alive(pid, 0) {
			t.Errorf("Mininet's shell of %s (pid %d) is still running", node, pid)
		}
	}
	if p.cmd.ProcessState == nil {
		t.Error("Mininet's Python process was not waited for")
	}
	for name := range rootLinks(t) {
		if before[name] {
			continue
		}
		for _, n := range top.Nodes {
			if strings.HasPrefix(name, n.Name+"-eth") {
				t.Errorf("interface %s left in the root namespace", name)
			}
		}
		if strings.HasPrefix(name, "eth") {
			t.Errorf("interface %s appeared in the root namespace", name)
		}
	}
}

// TestPingAllOnMininet runs Mininet's pingall through Go switches on the
// ready star and leaf-spine, and checks that nothing is left behind.
func TestPingAllOnMininet(t *testing.T) {
	needRoot(t)
	needMininet(t)
	for _, name := range []string{"star", "leafspine"} {
		t.Run(name, func(t *testing.T) {
			top, err := topologies.Open(name)
			if err != nil {
				t.Fatal(err)
			}
			before := rootLinks(t)
			var out bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			p, err := Start(ctx, top, Options{RunID: netns.TestRunID(testPrefix), Program: testplane.Name, Test: "pingall", Stdout: &out, Stderr: &out,
				Env: []string{switchcmd.ChildEnv + "=1"}})
			if err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			defer p.Stop()
			if err := p.Continue(); err != nil {
				t.Fatal(err)
			}
			werr := p.Wait()
			o := out.String()
			if werr != nil || !strings.Contains(o, "*** Results: 0% dropped (240/240 received)") {
				t.Errorf("pingall on Mininet (%v):\n%s", werr, o)
			}
			checkNothingLeft(t, p, top, before)
		})
	}
}

// TestMininetRunIsATracebedRun: a Mininet run waiting for tracebed is
// reachable with package lab (pingall, counters over P4Runtime, link down
// and up), and a SIGKILL of the Python process leaves nothing that
// lab.Cleanup does not remove.
func TestMininetRunIsATracebedRun(t *testing.T) {
	needRoot(t)
	needMininet(t)
	top := star3(t)
	before := rootLinks(t)
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	id := netns.TestRunID(testPrefix)
	// A second run may not take the id, even while the first is starting.
	p, err := Start(ctx, top, Options{RunID: id, Program: testplane.Name, Wait: true, Stdout: &out, Stderr: &out, Env: []string{switchcmd.ChildEnv + "=1"}})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	defer p.Stop()
	if _, err := Start(ctx, top, Options{RunID: id}); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("a second Start with run id %s: %v", id, err)
	}
	if err := p.Continue(); err != nil {
		t.Fatal(err)
	}
	r, err := lab.Attach(id)
	if err != nil {
		t.Fatal(err)
	}
	if r.State.Network != lab.NetworkMininet || r.State.Switch != lab.SwitchGo || len(r.State.Switches) != 1 {
		t.Errorf("state %+v", r.State)
	}
	if got := r.PingAll(ctx, 2*time.Second).Received(); got != 6 {
		t.Errorf("pingall: %d of 6 answered", got)
	}
	if err := r.Link("h2", "tor", false); err != nil {
		t.Fatal(err)
	}
	if got := r.PingAll(ctx, 300*time.Millisecond).Received(); got != 2 {
		t.Errorf("pingall with h2's link down: %d of 6 answered, want 2", got)
	}
	if err := r.Link("h2", "tor", true); err != nil {
		t.Fatal(err)
	}
	if got := r.PingAll(ctx, 2*time.Second).Received(); got != 6 {
		t.Errorf("pingall with h2's link up again: %d of 6 answered", got)
	}
	cs, err := r.Counters(ctx, "tor")
	if err != nil || len(cs) == 0 {
		t.Errorf("counters: %v, %v", cs, err)
	}
	// SIGKILL of Mininet's Python: its node shells lose their terminal;
	// the switch and the published namespaces stay until cleanup.
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.Exited()
	if err := netns.CheckClean(id); err == nil {
		t.Fatal("nothing left after SIGKILL: the test proves nothing")
	}
	if _, err := lab.Cleanup(id); err != nil {
		t.Error(err)
	}
	p.Stop()
	checkNothingLeft(t, p, top, before)
}

// TestHTBAgrees: TracebedIntf shapes a Mininet link with the HTB class
// 'tracebed topo up' gives a host link (netns.HTBClass) — the same token
// bucket and quantum — for rates from 1 Mbit/s to 100 Gbit/s and MTUs
// from 1500 to 9000, so that a lab on Mininet and the same topology on
// netns pace bursts alike.
func TestHTBAgrees(t *testing.T) {
	py := needMininet(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, HelperFile), Helper, 0o644)
	prog := fmt.Sprintf(`
import re, sys
sys.path.insert(0, %q)
import tracebed_mininet as tm
class Args: pass
class Run: pass
class Node: pass
for arg in sys.argv[1:]:
    mbit, mtu = arg.split('/')
    i = tm.TracebedIntf.__new__(tm.TracebedIntf)
    i.node = Node()
    if mtu != '0':
        i.node.run = Run()
        i.node.run.args = Args()
        i.node.run.args.mtu = int(mtu)
    cmds, parent = i.bwCmds(bw=float(mbit))
    cls = [c for c in cmds if ' class ' in c][0]
    print(arg, re.search(r'burst (\d+)b', cls).group(1), re.search(r'quantum (\d+)', cls).group(1))
`, dir)
	type row struct {
		mbit float64
		mtu  int // 0: no MTU given (the helper's default, 1500)
	}
	var rows []row
	for _, mbit := range []float64{0.1, 1, 2.5, 5, 8, 9, 9.2, 10, 20, 100, 400, 1000, 10000, 100000} {
		for _, mtu := range []int{0, 1500, 9000} {
			rows = append(rows, row{mbit, mtu})
		}
	}
	args := []string{"-c", prog}
	for _, r := range rows {
		args = append(args, fmt.Sprintf("%g/%d", r.mbit, r.mtu))
	}
	out, err := exec.Command(py, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(rows) {
		t.Fatalf("the helper printed %d lines for %d links:\n%s", len(lines), len(rows), out)
	}
	for i, r := range rows {
		var arg string
		var burst, quantum uint64
		if _, err := fmt.Sscan(lines[i], &arg, &burst, &quantum); err != nil {
			t.Fatalf("line %q: %v", lines[i], err)
		}
		wb, wq := netns.HTBClass(uint64(r.mbit*1e6), r.mtu)
		if burst != wb || quantum != wq {
			t.Errorf("%g Mbit/s, MTU %d: Mininet's TracebedIntf gives burst %d quantum %d, tracebed's netns burst %d quantum %d",
				r.mbit, r.mtu, burst, quantum, wb, wq)
		}
	}
}
