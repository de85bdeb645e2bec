package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tracebed/tracebed/analysis"
	"github.com/tracebed/tracebed/analysis/report"
	"github.com/tracebed/tracebed/emulator/sim"
	"github.com/tracebed/tracebed/experiments"
)

// testApp is tracebed with the kinds of the tests added: crash, whose runs
// misbehave on request.
func testApp(stdout, stderr io.Writer) *app {
	a := newApp(stdout, stderr)
	a.registry = experiments.NewRegistry(append(kinds(), crashKind{})...)
	return a
}

// crashKind is a kind of experiment whose runs (mode, in the workload or
// a scenario) panic in their own goroutine ("panic"), panic in a goroutine
// of their own making, which nothing can recover ("goroutine"), or run an
// event loop that never ends ("loop", after creating the file started
// names); "compile" panics in Compile, as a bug in a kind's checks would.
// Any other mode returns at once.
type crashKind struct{}

type crashParams struct {
	Mode    string `yaml:"mode"`
	Started string `yaml:"started"`
}

func (crashKind) Name() string { return "crash" }

func (crashKind) Compile(s *experiments.Spec) (experiments.Experiment, error) {
	var base crashParams
	if err := s.DecodeWorkload(&base); err != nil {
		return nil, err
	}
	e := crashExp{}
	for _, sc := range s.Scenarios {
		p := base
		if err := s.DecodeEntry(sc, &p); err != nil {
			return nil, err
		}
		if p.Mode == "compile" {
			panic("a bug in Compile")
		}
		e[sc.Name] = p
	}
	return e, nil
}

type crashExp map[string]crashParams

func (crashExp) Metrics() []analysis.MetricInfo { return []analysis.MetricInfo{{Name: "v"}} }

func (e crashExp) Run(ctx context.Context, r experiments.Run) (*analysis.Run, error) {
	p := e[r.Scenario]
	switch p.Mode {
	case "panic":
		panic("a bug in a run")
	case "goroutine":
		go panic("a bug in a goroutine of a run")
		<-ctx.Done()
		return nil, ctx.Err()
	case "loop":
		s := sim.New()
		var loop func()
		loop = func() { s.At(s.Now(), loop) }
		s.At(0, loop)
		defer s.InterruptOn(ctx)()
		if p.Started != "" {
			os.WriteFile(p.Started, nil, 0o644)
		}
		s.Run()
		return nil, ctx.Err()
	}
	return &analysis.Run{Metrics: analysis.Metrics{"v": 1}}, nil
}

func writeSpec(t *testing.T, name, body string) string {
	t.Helper()
	return writeIn(t, t.TempDir(), name, body)
}

// TestInternalErrors: a panic anywhere — in a run, in a kind's checks, in
// a goroutine nothing can recover — exits 1 with "internal error" and the
// bug-report hint, never 2 (bad input).
func TestInternalErrors(t *testing.T) {
	for _, mode := range []string{"panic", "compile"} {
		t.Run(mode, func(t *testing.T) {
			spec := writeSpec(t, "c.yaml", "kind: crash\npolicies: [p]\nworkload: {mode: "+mode+"}\n")
			var o, e bytes.Buffer
			code := testApp(&o, &e).execute(context.Background(), []string{"run", "--quiet", "--out", t.TempDir(), spec})
			if code != exitRunError || !strings.Contains(e.String(), "internal error") || !strings.Contains(e.String(), "bug in tracebed") {
				t.Errorf("exit %d, stderr:\n%s", code, e.String())
			}
		})
	}
	t.Run("goroutine", func(t *testing.T) {
		if runtime.GOOS != "linux" {
			t.Skip("skipping: the crash monitor runs on Linux only (docs/reliability.md)")
		}
		spec := writeSpec(t, "c.yaml", "kind: crash\npolicies: [p]\nworkload: {mode: goroutine}\n")
		code, out := runTracebed(t, "run", "--quiet", "--out", t.TempDir(), spec)
		if code != exitRunError || !strings.Contains(out, "a bug in a goroutine") || !strings.Contains(out, "internal error") || !strings.Contains(out, "bug in tracebed") {
			t.Errorf("exit %d, output:\n%s", code, out)
		}
	})
}

// TestInterrupt sends SIGINT, then SIGTERM, to tracebed while a run is
// busy in an event loop that never ends: tracebed exits 1 within moments
// (the time is logged), and the runs that finished are written, marked
// partial.
func TestInterrupt(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			dir := t.TempDir()
			started := filepath.Join(dir, "started")
			spec := writeSpec(t, "interrupt.yaml", "kind: crash\npolicies: [p1, p2]\nscenarios:\n  - quick\n  - {name: endless, mode: loop, started: "+started+"}\n")
			out := filepath.Join(dir, "out")
			c := tracebed(t, "run", "--quiet", "--parallel", "1", "--out", out, spec)
			var buf bytes.Buffer
			c.Stdout, c.Stderr = &buf, &buf
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- c.Wait() }()
			for {
				if _, err := os.Stat(started); err == nil {
					break
				}
				select {
				case err := <-exited:
					t.Fatalf("exited (%v) before the endless run started:\n%s", err, buf.String())
				case <-time.After(10 * time.Millisecond):
				}
			}
			sent := time.Now()
			c.Process.Signal(sig)
			var err error
			select {
			case err = <-exited:
			case <-time.After(time.Minute): // a bound against a hang, not a performance target
				c.Process.Kill()
				t.Fatalf("still running a minute after %v:\n%s", sig, buf.String())
			}
			t.Logf("exited (%v) %v after %v", err, time.Since(sent), sig)
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != exitRunError {
				t.Fatalf("exit %v, want %d:\n%s", err, exitRunError, buf.String())
			}
			res, rerr := analysis.Read(filepath.Join(out, "interrupt"))
			if rerr != nil {
				t.Fatalf("%v\n%s", rerr, buf.String())
			}
			if p := res.Partial; p == nil || p.Of != 4 || p.Done != 2 || len(res.Runs) != 2 || !strings.Contains(p.Reason, "interrupted by "+signalName(sig)) {
				t.Errorf("partial %+v with %d runs", p, len(res.Runs))
			}
			if !strings.Contains(buf.String(), "marked partial") {
				t.Errorf("output:\n%s", buf.String())
			}
			prov, err := analysis.ReadProvenance(filepath.Join(out, "interrupt"))
			if err != nil || !prov.Partial {
				t.Errorf("provenance %+v, %v", prov, err)
			}
			if _, err := report.ReadDataset(filepath.Join(out, "interrupt")); err == nil || !strings.Contains(err.Error(), "partial results") {
				t.Errorf("compare reads partial results: %v", err)
			}
		})
	}
}

// TestDevicesRefused: a spec, a topology or a trace that is a device or a
// pipe (which could block, or never end) is refused at once, as bad input.
func TestDevicesRefused(t *testing.T) {
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skip("skipping: no /dev/zero")
	}
	dir := t.TempDir()
	zero := filepath.Join(dir, "zero.yaml")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"validate a device", []string{"validate", zero}},
		{"run a device", []string{"run", "--quiet", "--out", dir, zero}},
		{"topology a device", []string{"validate", writeIn(t, dir, "t.yaml", "kind: ina\ntopology: /dev/zero\npolicies: [noina]\n")}},
		{"trace a device", []string{"validate", writeIn(t, dir, "j.yaml", "kind: ina\ntopology: star\ntrace: /dev/zero\npolicies: [noina]\n")}},
		{"memory trace a device", []string{"validate", writeIn(t, dir, "m.yaml", "kind: farmem\ntrace: /dev/zero\npolicies: [glitter]\n")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan struct{})
			var code int
			var stderr string
			go func() {
				code, _, stderr = run(t, tc.args...)
				close(done)
			}()
			select {
			case <-done:
			case <-time.After(time.Minute):
				t.Fatal("still reading after a minute")
			}
			if code != exitBadInput || !strings.Contains(stderr, "not a regular file") {
				t.Errorf("exit %d: %s", code, stderr)
			}
		})
	}
}
