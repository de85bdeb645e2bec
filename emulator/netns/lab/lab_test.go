//go:build linux && !nonetns

package lab

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tracebed/tracebed/emulator/dataplane"
	"github.com/tracebed/tracebed/emulator/internal/testplane"
	"github.com/tracebed/tracebed/emulator/netns"
	"github.com/tracebed/tracebed/emulator/switch/switchcmd"
	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/topologies"
)

// testPrefix starts the run ids of this test binary (see netns.RunTests).
var testPrefix = "lb" + netns.NewRunID()[:1]

func TestMain(m *testing.M) {
	switchcmd.Main(testplane.Registry) // the Go switches of the runs are this binary
	os.Exit(netns.RunTests(m, testPrefix))
}

// programs are the data planes of the test runs' Go switches.
func programs(t *testing.T) *dataplane.Registry {
	t.Helper()
	reg, err := testplane.Registry()
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: network namespaces need root (CI runs as root)")
	}
}

func star(t *testing.T, hosts int) *topologies.Topology {
	t.Helper()
	f, err := topologies.Generate(topologies.Params{Generate: "star", Hosts: hosts, Rate: units.Gbps})
	if err != nil {
		t.Fatal(err)
	}
	top, err := f.Build("star")
	if err != nil {
		t.Fatal(err)
	}
	return top
}

// removeKeptLogs removes the logs the run's dead switches left in
// KeptLogDir.
func removeKeptLogs(id string) {
	logs, _ := filepath.Glob(filepath.Join(KeptLogDir, netns.Prefix+id+"-*.log"))
	for _, l := range logs {
		os.Remove(l)
	}
}

// TestRunLifecycle brings a star up, attaches to it as another command
// would, pings all pairs, takes a link down and up, reads counters over
// P4Runtime, kills the switch (the watchdog reports it, the log is kept)
// and tears down.
func TestRunLifecycle(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id := netns.TestRunID(testPrefix)
	defer removeKeptLogs(id)
	defer Remove(id)
	r, err := Up(ctx, star(t, 3), nil, Options{Net: netns.Options{RunID: id}, Programs: programs(t)})
	if err != nil {
		t.Fatal(err)
	}
	a, err := Attach(id)
	if err != nil {
		t.Fatal(err)
	}
	if a.State.Switch != SwitchGo || a.State.Program != testplane.Name || a.State.Switches["tor"].PID != r.Procs.Procs[0].Cmd.Process.Pid {
		t.Errorf("attached state %+v", a.State)
	}
	res := a.PingAll(ctx, 2*time.Second)
	if res.Received() != 6 {
		var b bytes.Buffer
		res.Write(&b)
		t.Errorf("pingall:\n%s", b.String())
	}
	if err := a.Link("h1", "tor", false); err != nil {
		t.Fatal(err)
	}
	if got := a.PingAll(ctx, 200*time.Millisecond).Received(); got != 2 {
		t.Errorf("h1's link down: %d of 6 pings answered, want 2", got)
	}
	ls, err := a.Links()
	if err != nil || ls[0].Up || !ls[1].Up {
		t.Errorf("links %+v, %v", ls, err)
	}
	if err := a.Link("h1", "tor", true); err != nil {
		t.Fatal(err)
	}
	if got := a.PingAll(ctx, 2*time.Second).Received(); got != 6 {
		t.Errorf("h1's link up again: %d of 6 pings answered", got)
	}
	for _, bad := range [][2]string{{"h1", "h2"}, {"h1", "nosuch"}} {
		var ie InputError
		if err := a.Link(bad[0], bad[1], false); !errors.As(err, &ie) {
			t.Errorf("link %v: %v, want an input error", bad, err)
		}
	}
	cs, err := a.Counters(ctx, "tor")
	if err != nil {
		t.Fatal(err)
	}
	rx := int64(0)
	for _, c := range cs {
		if c.Name == "tracebed.port_rx" && c.Index == 1 {
			rx = c.Packets
		}
	}
	if rx < 4 {
		t.Errorf("port_rx[1] = %d after pings from h1", rx)
	}
	// Commands run in the nodes' namespaces.
	var out bytes.Buffer
	c := exec.Command("sh", "-c", "echo $TRACEBED_NODE; cat /proc/net/dev | grep -c eth0")
	c.Stdout = &out
	if err := a.Exec("h2", c); err != nil {
		t.Fatal(err)
	}
	c.Wait()
	if out.String() != "h2\n1\n" {
		t.Errorf("exec on h2 printed %q", out.String())
	}
	// The watchdog notices a switch killed outright and keeps its log.
	died := make(chan SwitchStatus, 1)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go a.Watch(wctx, 20*time.Millisecond, func(s SwitchStatus) { died <- s })
	syscall.Kill(a.State.Switches["tor"].PID, syscall.SIGKILL)
	select {
	case s := <-died:
		if s.Name != "tor" || s.Alive || !strings.HasPrefix(s.Log, KeptLogDir) {
			t.Errorf("watchdog reported %+v", s)
		}
		if data, err := os.ReadFile(s.Log); err != nil || !strings.Contains(string(data), "switch running") {
			t.Errorf("kept log: %q, %v", data, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the watchdog did not report the dead switch")
	}
	if st := a.Status(); len(st) != 1 || st[0].Alive {
		t.Errorf("status %+v", st)
	}
	kept, err := a.Down()
	if err != nil || len(kept) != 1 {
		t.Errorf("down: kept %v, %v", kept, err)
	}
	if err := netns.CheckClean(id); err != nil {
		t.Error(err)
	}
}

// TestRunIDInUse: a run id in use is refused before anything is created,
// and the run that holds it is untouched.
func TestRunIDInUse(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	id := netns.TestRunID(testPrefix)
	defer Remove(id)
	if _, err := Up(ctx, star(t, 2), nil, Options{Net: netns.Options{RunID: id}, Programs: programs(t)}); err != nil {
		t.Fatal(err)
	}
	// Another topology (other node names) under the same id.
	f, _ := topologies.Generate(topologies.Params{Generate: "leafspine", Spines: 1, Leaves: 1, HostsPerLeaf: 2, Rate: units.Gbps})
	ls, err := f.Build("ls")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Up(ctx, ls, nil, Options{Net: netns.Options{RunID: id}, Programs: programs(t)}); !errors.Is(err, netns.ErrRunInUse) {
		t.Fatalf("second Up with the same id: %v", err)
	}
	a, err := Attach(id)
	if err != nil {
		t.Fatal(err)
	}
	if a.State.Name != "star" || a.PingAll(ctx, 2*time.Second).Received() != 2 || !a.Status()[0].Alive {
		t.Error("the first run was disturbed")
	}
	for _, bad := range []string{"nosuch", "BAD"} {
		var ie InputError
		if _, err := Attach(bad); !errors.As(err, &ie) {
			t.Errorf("Attach(%q): %v, want an input error", bad, err)
		}
	}
	if _, err := a.Down(); err != nil {
		t.Error(err)
	}
}
