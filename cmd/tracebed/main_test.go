package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = newApp(&o, &e).execute(context.Background(), args)
	return code, o.String(), e.String()
}

func TestExitCodes(t *testing.T) {
	out := t.TempDir()
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
		stdout string
	}{
		{"version", []string{"version"}, 0, "", "tracebed 0."},
		{"unknown command", []string{"frobnicate"}, 2, "unknown command", ""},
		{"bad flag", []string{"run", "--no-such-flag"}, 2, "unknown flag", ""},
		{"missing spec", []string{"run", "--out", out, "nope.yaml"}, 2, "no such file", ""},
		{"bad spec", []string{"run", "--out", out, "testdata/bad-spec.yaml"}, 2, `testdata/bad-spec.yaml:3:32: workload.rate: rate "fast"`, ""},
		{"bad substrate", []string{"run", "--out", out, "--substrate", "vm", "testdata/small-incast.yaml"}, 2, "--substrate", ""},
		{"validate bad topology", []string{"validate", "testdata/bad-topology.yaml"}, 2, `testdata/bad-topology.yaml:7:28: topology.links[0].endpoints[1]: unknown node "s2"`, ""},
		{"validate good", []string{"validate", "../../topologies/star.yaml", "../../experiments/incast.yaml"}, 0, "", "ok (topology star"},
		{"validate needs files", []string{"validate"}, 2, "requires at least 1 arg", ""},
		{"validate bmv2_scale", []string{"validate", "testdata/bmv2-scale.yaml"}, 2, "testdata/bmv2-scale.yaml:5:13: bmv2_scale: 10: runs on bmv2 use it as their scale, and there scale: 10: the incast demonstration", ""},
		{"bad scale", []string{"run", "--out", out, "--scale", "0.5", "testdata/small-incast.yaml"}, 2, "--scale 0.5: want 1 to", ""},
		{"scale refused by the kind", []string{"run", "--out", out, "--scale", "2", "testdata/small-incast.yaml"}, 2, "scale: 2: the incast demonstration", ""},
		{"run", []string{"run", "--quiet", "--out", out, "testdata/small-incast.yaml"}, 0, "", "small-incast — scenario fanin-4"},
		{"topo generate", []string{"topo", "generate", "fattree", "--k", "6"}, 0, "", "name: fattree-k6"},
		{"topo generate bad", []string{"topo", "generate", "fattree", "--k", "5"}, 2, "k: 5; want an even number", ""},
		{"topo show", []string{"topo", "show", "leafspine"}, 0, "", "route 10.0.0.16"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := run(t, tt.args...)
			if code != tt.code || !strings.Contains(stderr, tt.stderr) || !strings.Contains(stdout, tt.stdout) {
				t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, stdout, stderr)
			}
		})
	}
}

// TestDeterministicResults: the same spec and seed give byte-identical
// results.json, whatever the parallelism.
func TestDeterministicResults(t *testing.T) {
	var files [][]byte
	for _, par := range []string{"1", "2"} {
		out := t.TempDir()
		if code, _, stderr := run(t, "run", "--quiet", "--parallel", par, "--out", out, "testdata/small-incast.yaml"); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		data, err := os.ReadFile(filepath.Join(out, "small-incast", "results.json"))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, data)
		for _, f := range []string{"results.csv", "results.md"} {
			if _, err := os.Stat(filepath.Join(out, "small-incast", f)); err != nil {
				t.Error(err)
			}
		}
	}
	if !bytes.Equal(files[0], files[1]) {
		t.Fatal("results.json differs between two runs of the same spec and seeds")
	}
	if !bytes.Contains(files[0], []byte(`"schema": "tracebed.results/v1"`)) {
		t.Fatalf("results.json lacks the schema: %.200s", files[0])
	}
}

// TestScaleFlagOverridesSpec: --scale replaces the spec's scale factor,
// and the results record the one that ran.
func TestScaleFlagOverridesSpec(t *testing.T) {
	out := t.TempDir()
	if code, _, stderr := run(t, "run", "--quiet", "--substrate", "sim", "--scale", "40000", "--out", out, "dynaina-netns"); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	data, _ := os.ReadFile(filepath.Join(out, "dynaina-netns", "results.json"))
	if !bytes.Contains(data, []byte(`"scale": 40000`)) || bytes.Contains(data, []byte(`"scale": 10000`)) {
		t.Errorf("scale 40000 not recorded (or 10000 still is): %.600s", data)
	}
}

func TestSeedFlagOverridesSpec(t *testing.T) {
	out := t.TempDir()
	if code, _, stderr := run(t, "run", "--quiet", "--seed", "42", "--out", out, "testdata/small-incast.yaml"); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	data, _ := os.ReadFile(filepath.Join(out, "small-incast", "results.json"))
	if !bytes.Contains(data, []byte(`"seeds": [`+"\n"+`    42`+"\n  ]")) {
		t.Errorf("seed 42 not recorded: %.400s", data)
	}
}
