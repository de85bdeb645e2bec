//go:build linux && !nonetns

package programs_test

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tracebed/tracebed/emulator/bmv2"
	"github.com/tracebed/tracebed/emulator/netns"
	"github.com/tracebed/tracebed/emulator/netns/lab"
	"github.com/tracebed/tracebed/emulator/netns/mininet"
	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/p4/programs"
	"github.com/tracebed/tracebed/topologies"
)

// The lab tests that need a P4 program (bmv2 runs P4 source, which only
// the data planes of p4/ have) live here; the engine's own lab and
// Mininet tests run its test data plane on Go switches.

// needBMv2 skips the test unless it runs as root where bmv2 is installed.
func needBMv2(t *testing.T) bmv2.Tools {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: network namespaces need root (CI runs as root)")
	}
	tools, err := bmv2.FindTools(bmv2.Options{})
	if err != nil {
		t.Skipf("skipping: %v", err)
	}
	return tools
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

// TestLabUpBMv2 brings a star up with bmv2 switches loaded with fwd over
// P4Runtime (where bmv2 is installed) and pings all pairs.
func TestLabUpBMv2(t *testing.T) {
	needBMv2(t)
	reg, err := programs.Registry()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	id := netns.TestRunID(prefix)
	defer lab.Remove(id)
	r, err := lab.Up(ctx, star3(t), nil, lab.Options{Net: netns.Options{RunID: id}, Switch: lab.SwitchBMv2, Programs: reg, Program: "fwd"})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.PingAll(ctx, 2*time.Second).Received(); got != 6 {
		t.Errorf("pingall through bmv2: %d of 6 answered", got)
	}
	if cs, err := r.Counters(ctx, "tor"); err != nil || len(cs) == 0 {
		t.Errorf("counters of bmv2: %v, %v", cs, err)
	}
	if _, err := r.Down(); err != nil {
		t.Error(err)
	}
}

// TestBMv2OnMininet brings a star up on Mininet with BMv2Switch, loads fwd
// over P4Runtime from Go and runs Mininet's pingall: where bmv2 and
// Mininet are installed.
func TestBMv2OnMininet(t *testing.T) {
	tools := needBMv2(t)
	if _, err := mininet.Python(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	reg, err := programs.Registry()
	if err != nil {
		t.Fatal(err)
	}
	top := star3(t)
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	p, err := mininet.Start(ctx, top, mininet.Options{RunID: netns.TestRunID(prefix), Switch: mininet.SwitchBMv2, SimpleSwitch: tools.Switch,
		Test: "pingall", Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	defer p.Stop()
	r, err := lab.Attach(p.RunID)
	if err != nil {
		t.Fatal(err)
	}
	sockets := map[string]string{}
	for name, s := range r.State.Switches {
		sockets[name] = s.Socket
	}
	if r.State.Switch != "bmv2" || len(sockets) != 1 {
		t.Fatalf("state %+v", r.State)
	}
	if err := lab.LoadBMv2(ctx, top, sockets, reg.Lookup("fwd"), bmv2.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := p.Continue(); err != nil {
		t.Fatal(err)
	}
	werr := p.Wait()
	if o := out.String(); werr != nil || !strings.Contains(o, "*** Results: 0% dropped (6/6 received)") {
		t.Errorf("pingall through bmv2 on Mininet (%v):\n%s", werr, o)
	}
	if err := netns.CheckClean(p.RunID); err != nil {
		t.Error(err)
	}
}
