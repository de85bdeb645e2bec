//go:build linux && !nonetns

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tracebed/tracebed/analysis"
	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/netns"
	"github.com/tracebed/tracebed/emulator/testbed"
	"github.com/tracebed/tracebed/experiments"
	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/p4/fwd"
	"github.com/tracebed/tracebed/topologies"
	"github.com/tracebed/tracebed/workloads/incast"
)

// pingKind is a minimal experiment kind that runs on both substrates: h1
// sends `count` datagrams to an echo agent on h2, one per millisecond, and
// the run reports the fraction answered.
type pingKind struct{}

func (pingKind) Name() string { return "ping" }

func (pingKind) Compile(spec *experiments.Spec) (experiments.Experiment, error) {
	var w struct {
		Count int  `yaml:"count"`
		Leak  bool `yaml:"leak"` // a buggy kind: never closes its testbed
	}
	if err := spec.DecodeWorkload(&w); err != nil {
		return nil, err
	}
	return pingExperiment{count: w.Count, leak: w.Leak}, nil
}

type pingExperiment struct {
	count int
	leak  bool
}

func (pingExperiment) Metrics() []analysis.MetricInfo {
	return []analysis.MetricInfo{{Name: "answered", Better: analysis.Higher}}
}

type echoAgent struct{ env emulator.Env }

func (e *echoAgent) Start(env emulator.Env)            { e.env = env }
func (e *echoAgent) Recv(from emulator.Addr, p []byte) { e.env.Send(from, p) }

type pingAgent struct {
	to          emulator.Addr
	count, sent int
	got         int
	env         emulator.Env
}

func (p *pingAgent) Start(env emulator.Env) { p.env = env; p.tick() }
func (p *pingAgent) tick() {
	if p.sent < p.count {
		p.env.Send(p.to, []byte("ping"))
		p.sent++
		p.env.After(time.Millisecond, p.tick)
	}
}
func (p *pingAgent) Recv(emulator.Addr, []byte) { p.got++ }

func (e pingExperiment) Run(ctx context.Context, r experiments.Run) (*analysis.Run, error) {
	f, err := topologies.Generate(topologies.Params{Generate: "star", Hosts: 2, Rate: 100 * units.Mbps})
	if err != nil {
		return nil, err
	}
	top, err := f.Build("star")
	if err != nil {
		return nil, err
	}
	prog := fwd.SwitchProgram()
	tb, err := r.NewTestbed(ctx, testbed.Config{Topology: top, Program: &prog, Seed: uint64(r.Seed)})
	if err != nil {
		return nil, err
	}
	if e.leak {
		return &analysis.Run{Metrics: map[string]float64{"answered": 0}}, nil
	}
	defer tb.Close()
	srv, err := tb.Attach("h2", 7, &echoAgent{})
	if err != nil {
		return nil, err
	}
	p := &pingAgent{to: srv.Local(), count: e.count}
	cli, err := tb.Attach("h1", 7, p)
	if err != nil {
		return nil, err
	}
	done := func() bool {
		var fin bool
		tb.Inspect(cli, func() { fin = p.got == p.count })
		return fin
	}
	if err := tb.Run(ctx, 10*time.Millisecond, time.Minute, done); err != nil {
		return nil, err
	}
	if err := tb.Close(); err != nil {
		return nil, err
	}
	return &analysis.Run{Metrics: map[string]float64{"answered": float64(p.got) / float64(p.count)}}, nil
}

// pingApp is tracebed with the ping kind, whose netns runs are named with
// this binary's prefix.
func pingApp() (*app, *bytes.Buffer, *bytes.Buffer) {
	var o, e bytes.Buffer
	a := newApp(&o, &e)
	a.registry = experiments.NewRegistry(pingKind{}, incast.Kind{})
	a.netnsRunPrefix = netnsPrefix
	return a, &o, &e
}

func pingSpec(t *testing.T, count int) string {
	return pingSpecLeak(t, count, false)
}

func pingSpecLeak(t *testing.T, count int, leak bool) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ping.yaml")
	spec := fmt.Sprintf("name: ping\nkind: ping\nseeds: [1]\nsubstrate: netns\nworkload: {count: %d, leak: %v}\npolicies: [a, b]\n", count, leak)
	if err := os.WriteFile(path, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRunNetns: 'run --substrate netns' runs a kind on the netns testbed
// (Go switch processes of this binary), one run at a time, and leaves
// nothing behind.
func TestRunNetns(t *testing.T) {
	needRoot(t)
	a, o, e := pingApp()
	out := t.TempDir()
	code := a.execute(context.Background(), []string{"run", "--quiet", "--out", out, pingSpec(t, 50)})
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, o, e)
	}
	data, err := os.ReadFile(filepath.Join(out, "ping", "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res analysis.Results
	if err := json.Unmarshal(data, &res); err != nil {
		t.Fatal(err)
	}
	if res.Substrate != "netns" || len(res.Runs) != 2 || res.Runs[0].Metrics["answered"] != 1 {
		t.Errorf("results: %s", data)
	}
	if err := netns.CheckClean(netnsPrefix); err != nil {
		t.Fatal(err)
	}
}

// TestRunNetnsLeak: a kind that never closes its testbeds still leaves
// nothing behind once the command is done.
func TestRunNetnsLeak(t *testing.T) {
	needRoot(t)
	a, o, e := pingApp()
	if code := a.execute(context.Background(), []string{"run", "--quiet", "--out", t.TempDir(), pingSpecLeak(t, 1, true)}); code != 0 {
		t.Fatalf("exit %d\n%s%s", code, o, e)
	}
	if err := netns.CheckClean(netnsPrefix); err != nil {
		t.Fatal(err)
	}
}

// TestRunNetnsInterrupted: Ctrl-C (the command's context ends) during a
// netns run stops it at once and tears everything down.
func TestRunNetnsInterrupted(t *testing.T) {
	needRoot(t)
	a, o, e := pingApp()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(1500*time.Millisecond, cancel)
	start := time.Now()
	code := a.execute(ctx, []string{"run", "--quiet", "--out", t.TempDir(), pingSpec(t, 1<<30)})
	if code == 0 || time.Since(start) > 20*time.Second {
		t.Fatalf("exit %d after %v\n%s%s", code, time.Since(start), o, e)
	}
	t.Logf("exit %d after %v: %s", code, time.Since(start), e)
	if err := netns.CheckClean(netnsPrefix); err != nil {
		t.Fatal(err)
	}
}

// TestRunNetnsErrors: a bad --switch, bmv2 without its tools, and a kind
// that runs on sim only stop before anything runs, with exit code 2.
func TestRunNetnsErrors(t *testing.T) {
	a, o, e := pingApp()
	if code := a.execute(context.Background(), []string{"run", "--switch", "tofino", pingSpec(t, 1)}); code != exitBadInput || !strings.Contains(e.String(), "--switch") {
		t.Errorf("--switch tofino: exit %d\n%s%s", code, o, e)
	}
	a, o, e = pingApp()
	code := a.execute(context.Background(), []string{"run", "--substrate", "netns", "testdata/small-incast.yaml"})
	if code != exitBadInput || !strings.Contains(e.String(), "runs on sim only") {
		t.Errorf("incast on netns: exit %d\n%s%s", code, o, e)
	}
	if os.Geteuid() != 0 {
		a, o, e = pingApp()
		code := a.execute(context.Background(), []string{"run", pingSpec(t, 1)})
		if code != exitBadInput || !strings.Contains(e.String(), "needs root") {
			t.Errorf("netns as a user: exit %d\n%s%s", code, o, e)
		}
		return
	}
	for _, tool := range []string{"simple_switch_grpc", "p4c-bm2-ss"} {
		if _, err := exec.LookPath(tool); err == nil {
			t.Skipf("%s is installed: the missing-tool message cannot be checked", tool)
		}
	}
	a, o, e = pingApp()
	code = a.execute(context.Background(), []string{"run", "--switch", "bmv2", pingSpec(t, 1)})
	if code != exitBadInput || !strings.Contains(e.String(), "simple_switch_grpc and p4c-bm2-ss") || !strings.Contains(e.String(), "tutorials") {
		t.Errorf("--switch bmv2 without bmv2: exit %d\n%s%s", code, o, e)
	}
	if err := netns.CheckClean(netnsPrefix); err != nil {
		t.Fatal(err)
	}
}
