//go:build linux && !nonetns

package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"

	"github.com/tracebed/tracebed/emulator/netns"
	"github.com/tracebed/tracebed/emulator/netns/lab"
	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/emulator/switch/switchcmd"
	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/topologies"
)

func smallStar(t *testing.T) string {
	t.Helper()
	f, err := topologies.Generate(topologies.Params{Generate: "star", Hosts: 3, Rate: units.Gbps, Name: "small"})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "small.yaml")
	if err := os.WriteFile(path, f.YAML(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func readState(t *testing.T, id string) *lab.State {
	t.Helper()
	st, err := lab.ReadState(id)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestTopoLifecycle(t *testing.T) {
	needRoot(t)
	id := netns.TestRunID(netnsPrefix)
	defer netns.Remove(id)
	topoFile := smallStar(t)
	code, out := runTracebed(t, "topo", "up", topoFile, "--run-id", id, "--detach")
	if code != 0 {
		t.Fatalf("topo up: exit %d\n%s", code, out)
	}
	if !strings.Contains(out, "is up as run "+id) || !strings.Contains(out, "tracebed topo exec") {
		t.Errorf("topo up printed:\n%s", out)
	}
	st := readState(t, id)
	if len(st.Switches) != 1 {
		t.Fatalf("state: %+v", st)
	}
	// Hosts reach each other through the switch process.
	top, err := topologies.Load(st.Topology)
	if err != nil {
		t.Fatal(err)
	}
	n, err := netns.Attach(id, top)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := n.Ping(ctx, "h1", top.Node("h3").IP, 1); err != nil {
		t.Error(err)
	}
	if err := n.TCPCheck(ctx, "h3", "h2", 1<<20); err != nil {
		t.Error(err)
	}
	// 'topo exec' runs in the node's namespace and passes the exit code.
	if code, out := runTracebed(t, "topo", "exec", "h2", "--run", id, "--", "sh", "-c", "test -e /run/netns/"+n.Namespace("h2")+" && exit 3"); code != 3 {
		t.Errorf("topo exec: exit %d, want 3\n%s", code, out)
	}
	if code, _ := runTracebed(t, "topo", "exec", "nosuch", "--run", id, "--", "true"); code != exitBadInput {
		t.Errorf("topo exec on an unknown node: exit %d", code)
	}
	// The switch answers P4Runtime on its socket.
	c, err := p4rt.Dial(ctx, st.Switches["tor"].Socket, p4rt.DialOptions{DeviceID: 1, ElectionID: 1})
	if err != nil {
		t.Fatal(err)
	}
	d, err := c.CounterValue(ctx, "tracebed.port_rx", 1)
	if err != nil || d.GetPacketCount() == 0 {
		t.Errorf("port_rx[1] = %v, %v", d, err)
	}
	es, err := c.Read(ctx, &p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: &p4v1.TableEntry{}}})
	if err != nil || len(es) != 3 { // a route to each host
		t.Errorf("routes read: %d, %v", len(es), err)
	}
	c.Close()
	// A capture of port 1 while h1 pings: h1 pings until the capture has
	// its two frames (under load the capture may start after the first
	// pings), and the capture stops after 30 s whatever happens.
	pcap := filepath.Join(t.TempDir(), "tor1.pcapng")
	capture := tracebed(t, "topo", "capture", "tor:1", "-w", pcap, "--run", id, "--count", "2", "--duration", "30s")
	var capOut bytes.Buffer
	capture.Stdout, capture.Stderr = &capOut, &capOut
	if err := capture.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- capture.Wait() }()
	pingCtx, pingCancel := context.WithTimeout(context.Background(), time.Minute)
	defer pingCancel()
	var capErr error
pinging:
	for {
		n.Ping(pingCtx, "h1", top.Node("h2").IP, 1)
		select {
		case capErr = <-exited:
			break pinging
		case <-time.After(200 * time.Millisecond):
		case <-pingCtx.Done():
			capture.Process.Kill()
			t.Fatalf("capture still running after a minute:\n%s", capOut.String())
		}
	}
	if capErr != nil {
		t.Errorf("capture: %v\n%s", capErr, capOut.String())
	}
	if fi, err := os.Stat(pcap); err != nil || fi.Size() < 100 {
		t.Errorf("capture file: %v, %v", fi, err)
	}
	if code, out := runTracebed(t, "topo", "down", "--run", id); code != 0 {
		t.Fatalf("topo down: exit %d\n%s", code, out)
	}
	if err := netns.CheckClean(id); err != nil {
		t.Error(err)
	}
}

// TestTopoUpKilled kills a running 'topo up' with SIGKILL: its switches
// die with it, and 'tracebed cleanup' removes what is left.
func TestTopoUpKilled(t *testing.T) {
	needRoot(t)
	id := netns.TestRunID(netnsPrefix)
	defer netns.Remove(id)
	up := tracebed(t, "topo", "up", smallStar(t), "--run-id", id)
	var out bytes.Buffer
	up.Stdout, up.Stderr = &out, &out
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	st := waitState(t, id, up, &out)
	pid := st.Switches["tor"].PID
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("switch not running: %v", err)
	}
	up.Process.Kill()
	up.Wait()
	// The switch follows its parent (parent-death signal: SIGTERM, so it
	// stops as it would on Ctrl-C, which takes a while on a loaded
	// machine). Once dead it may stay a zombie until whoever adopted it
	// reaps it: that counts as gone.
	gone, killed := false, time.Now()
	for deadline := killed.Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if !running(pid) {
			gone = true
			break
		}
	}
	t.Logf("the switch was gone %v after topo up was killed", time.Since(killed).Round(time.Millisecond))
	if !gone {
		t.Error("switch still running 30 s after topo up was killed")
	}
	if err := netns.CheckClean(id); err == nil {
		t.Fatal("nothing left after SIGKILL: the test proves nothing")
	}
	defer removeKeptLogs(id) // cleanup keeps the log of the switch that died
	if code, out := runTracebed(t, "cleanup", "--run", id); code != 0 || !strings.Contains(out, "removed run "+id) {
		t.Errorf("cleanup: exit %d\n%s", code, out)
	}
	if err := netns.CheckClean(id); err != nil {
		t.Error(err)
	}
}

// TestTopoUpInterrupt: Ctrl-C (SIGINT) tears a foreground 'topo up' down.
func TestTopoUpInterrupt(t *testing.T) {
	needRoot(t)
	id := netns.TestRunID(netnsPrefix)
	defer netns.Remove(id)
	up := tracebed(t, "topo", "up", smallStar(t), "--run-id", id)
	var out bytes.Buffer
	up.Stdout, up.Stderr = &out, &out
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	waitState(t, id, up, &out)
	up.Process.Signal(syscall.SIGINT)
	if err := up.Wait(); err != nil {
		t.Errorf("topo up after Ctrl-C: %v\n%s", err, out.String())
	}
	if err := netns.CheckClean(id); err != nil {
		t.Error(err)
	}
}

func waitState(t *testing.T, id string, up *exec.Cmd, out fmt.Stringer) *lab.State {
	t.Helper()
	return waitStateWithin(t, id, up, out, 10*time.Second)
}

func waitStateWithin(t *testing.T, id string, up *exec.Cmd, out fmt.Stringer, d time.Duration) *lab.State {
	t.Helper()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); {
		if _, err := os.Stat(lab.StatePath(id)); err == nil {
			return readState(t, id)
		}
		time.Sleep(20 * time.Millisecond)
	}
	up.Process.Kill()
	up.Wait()
	if out != nil {
		t.Logf("topo up printed:\n%s", out)
	}
	t.Fatal("topo up did not come up")
	return nil
}

func TestSwitchListensOnLoopbackOnly(t *testing.T) {
	for _, tc := range []struct {
		addr string
		ok   bool
	}{
		{"/run/tracebed/x.sock", true},
		{"unix:///tmp/a.sock", true},
		{"127.0.0.1:9559", true},
		{"localhost:9559", true},
		{"[::1]:9559", true},
		{"10.0.0.1:9559", false},
		{"0.0.0.0:9559", false},
		{":9559", false},
		{"nonsense", false},
	} {
		_, _, err := switchcmd.ValidLoopback(tc.addr)
		if (err == nil) != tc.ok {
			t.Errorf("validLoopback(%q): %v", tc.addr, err)
		}
	}
	code, _, stderr := run(t, "switch", "--topology", "star", "--name", "tor", "--grpc", "0.0.0.0:9559")
	if code != exitBadInput || !strings.Contains(stderr, "loopback") {
		t.Errorf("switch on 0.0.0.0: exit %d, %s", code, stderr)
	}
	code, _, _ = run(t, "switch", "--topology", "star", "--name", "h1", "--grpc", "/tmp/x.sock")
	if code == 0 {
		t.Error("switch for a host started")
	}
}

// syncBuffer is a bytes.Buffer a process writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// removeKeptLogs removes the switch logs that run id left in lab.KeptLogDir.
func removeKeptLogs(id string) {
	logs, _ := filepath.Glob(filepath.Join(lab.KeptLogDir, netns.Prefix+id+"-*.log"))
	for _, l := range logs {
		os.Remove(l)
	}
}

// TestTopoRunIDs: a run id in use is refused before anything is created
// (exit 2) and the live run is untouched; an invalid id exits 2; a run that
// does not exist is named as such (exit 2).
func TestTopoRunIDs(t *testing.T) {
	needRoot(t)
	id := netns.TestRunID(netnsPrefix)
	defer netns.Remove(id)
	if code, out := runTracebed(t, "topo", "up", smallStar(t), "--run-id", id, "--detach"); code != 0 {
		t.Fatalf("topo up: exit %d\n%s", code, out)
	}
	before := readState(t, id)
	code, out := runTracebed(t, "topo", "up", "leafspine", "--run-id", id, "--detach")
	if code != exitBadInput || !strings.Contains(out, "in use") {
		t.Errorf("topo up with a run id in use: exit %d\n%s", code, out)
	}
	after := readState(t, id)
	if after.Name != before.Name || after.Switches["tor"].PID != before.Switches["tor"].PID {
		t.Errorf("the live run changed: %+v → %+v", before, after)
	}
	if code, out := runTracebed(t, "topo", "pingall", "--run", id); code != 0 {
		t.Errorf("the live run lost connectivity: exit %d\n%s", code, out)
	}
	for _, args := range [][]string{
		{"topo", "up", "star", "--run-id", "Bad-Id"},
		{"topo", "up", "star", "--run-id", "toolong7"},
		{"topo", "down", "--run", "Bad-Id"},
		{"cleanup", "--run", "Bad-Id"},
	} {
		if code, out := runTracebed(t, args...); code != exitBadInput || !strings.Contains(out, "lowercase letters or digits") {
			t.Errorf("%v: exit %d\n%s", args, code, out)
		}
	}
	for _, cmd := range []string{"down", "exec", "pingall", "status", "cli"} {
		args := []string{"topo", cmd, "--run", "nosuch"}
		if cmd == "exec" {
			args = append(args, "h1", "--", "true")
		}
		if code, out := runTracebed(t, args...); code != exitBadInput || !strings.Contains(out, "there is no run nosuch") {
			t.Errorf("%v: exit %d\n%s", args, code, out)
		}
	}
	if code, out := runTracebed(t, "topo", "down", "--run", id); code != 0 {
		t.Errorf("topo down: exit %d\n%s", code, out)
	}
	if err := netns.CheckClean(id); err != nil {
		t.Error(err)
	}
}

// TestTopoWatchdog kills the switch of a foreground 'topo up' outright: it
// says so on stderr and keeps the topology up, 'topo status' reports it
// (exit 1), and Ctrl-C tears down keeping the switch's log.
func TestTopoWatchdog(t *testing.T) {
	needRoot(t)
	id := netns.TestRunID(netnsPrefix)
	defer netns.Remove(id)
	defer removeKeptLogs(id)
	up := tracebed(t, "topo", "up", smallStar(t), "--run-id", id)
	var out syncBuffer
	up.Stdout, up.Stderr = &out, &out
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	st := waitState(t, id, up, nil)
	syscall.Kill(st.Switches["tor"].PID, syscall.SIGKILL)
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(out.String(), "has died") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(out.String(), "switch tor (pid") || !strings.Contains(out.String(), "stays up") {
		t.Errorf("topo up did not report the dead switch:\n%s", out.String())
	}
	code, status := runTracebed(t, "topo", "status", "--run", id)
	if code != 1 || !strings.Contains(status, "has died") || !strings.Contains(status, "switch running") {
		t.Errorf("topo status: exit %d\n%s", code, status)
	}
	up.Process.Signal(syscall.SIGINT)
	if err := up.Wait(); err != nil {
		t.Errorf("topo up after Ctrl-C: %v\n%s", err, out.String())
	}
	logs, _ := filepath.Glob(filepath.Join(lab.KeptLogDir, netns.Prefix+id+"-tor.log"))
	if len(logs) != 1 {
		t.Errorf("the dead switch's log was not kept:\n%s", out.String())
	}
	if err := netns.CheckClean(id); err != nil {
		t.Error(err)
	}
}

// running reports whether process pid exists and is not a zombie.
func running(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state …: the state follows the last ')'.
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}
