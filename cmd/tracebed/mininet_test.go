//go:build linux && !nonetns

package main

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tracebed/tracebed/emulator/netns"
	"github.com/tracebed/tracebed/emulator/netns/lab"
	"github.com/tracebed/tracebed/emulator/netns/mininet"
)

func needMininet(t *testing.T) {
	t.Helper()
	needRoot(t)
	if err := mininet.Available(); err != nil {
		t.Skipf("skipping: %v", err)
	}
}

// TestMininetCommand runs 'tracebed mininet' with pingall on a small star
// (exit 0, every ping answered), then kills a 'tracebed mininet' waiting
// in its CLI: Mininet tears its network down by itself (parent-death
// signal); and after SIGKILL of both tracebed and Mininet, 'tracebed
// cleanup' removes what is left.
func TestMininetCommand(t *testing.T) {
	needMininet(t)
	topo := smallStar(t)
	id := netns.TestRunID(netnsPrefix)
	defer lab.Remove(id)
	code, out := runTracebed(t, "mininet", topo, "--run-id", id, "--test", "pingall")
	if code != 0 || !strings.Contains(out, "*** Results: 0% dropped (6/6 received)") {
		t.Errorf("tracebed mininet --test pingall: exit %d\n%s", code, out)
	}
	if err := netns.CheckClean(id); err != nil {
		t.Error(err)
	}
	if code, out := runTracebed(t, "mininet", topo, "--run-id", "Bad"); code != exitBadInput {
		t.Errorf("tracebed mininet --run-id Bad: exit %d\n%s", code, out)
	}

	// SIGKILL of tracebed: Mininet's Python follows it (parent-death
	// signal) and tears down.
	up := func() (*syncBuffer, func()) {
		c := tracebed(t, "mininet", topo, "--run-id", id)
		pr, pw, err := os.Pipe() // the CLI's input, never written
		if err != nil {
			t.Fatal(err)
		}
		c.Stdin = pr
		var o syncBuffer
		c.Stdout, c.Stderr = &o, &o
		// Mininet inherits the output pipe: do not wait for it forever.
		c.WaitDelay = 5 * time.Second
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		waitStateWithin(t, id, c, &o, 3*time.Minute)
		return &o, func() {
			c.Process.Signal(syscall.SIGKILL)
			c.Wait()
			pw.Close()
			pr.Close()
		}
	}
	o, kill := up()
	st := readState(t, id)
	kill()
	deadline := time.Now().Add(time.Minute)
	for netns.CheckClean(id) != nil && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if err := netns.CheckClean(id); err != nil {
		t.Errorf("after SIGKILL of tracebed mininet: %v\n%s", err, o)
	}
	for deadline := time.Now().Add(30 * time.Second); lab.Alive(st.PID, st.PIDStart) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	if lab.Alive(st.PID, st.PIDStart) {
		t.Errorf("Mininet's Python (pid %d) still runs", st.PID)
	}

	// SIGKILL of both (Mininet stopped first, so that it cannot tear
	// down when tracebed dies): cleanup removes the rest.
	_, kill = up()
	st = readState(t, id)
	syscall.Kill(st.PID, syscall.SIGSTOP)
	kill()
	syscall.Kill(st.PID, syscall.SIGKILL)
	for lab.Alive(st.PID, st.PIDStart) {
		time.Sleep(10 * time.Millisecond)
	}
	if err := netns.CheckClean(id); err == nil {
		t.Fatal("nothing left after SIGKILL: the test proves nothing")
	}
	if code, out := runTracebed(t, "cleanup", "--run", id); code != 0 || !strings.Contains(out, "removed run "+id) {
		t.Errorf("cleanup: exit %d\n%s", code, out)
	}
	if err := netns.CheckClean(id); err != nil {
		t.Error(err)
	}
}
