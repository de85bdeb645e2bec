package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tracebed/tracebed/analysis"
	"github.com/tracebed/tracebed/internal/testproc"
)

const smallSweep = "testdata/small-sweep.yaml"

// self returns the command that runs this test binary as tracebed.
func self(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := testproc.Command(t, exe, args...)
	cmd.Env = append(os.Environ(), "TRACEBED_TEST_AS_MAIN=1")
	return cmd
}

// unsharded runs spec in this process and returns its results directory.
func unsharded(t *testing.T, spec string) string {
	t.Helper()
	out := t.TempDir()
	if code, _, stderr := run(t, "run", "--quiet", "--plots=false", "--out", out, spec); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	return filepath.Join(out, strings.TrimSuffix(filepath.Base(spec), ".yaml"))
}

// sameResults fails unless dir holds the same results.json, results.csv
// and results.md as want.
func sameResults(t *testing.T, want, dir string) {
	t.Helper()
	for _, f := range []string{"results.json", "results.csv", "results.md"} {
		a, err1 := os.ReadFile(filepath.Join(want, f))
		b, err2 := os.ReadFile(filepath.Join(dir, f))
		if err1 != nil || err2 != nil {
			t.Fatalf("%v %v", err1, err2)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s of the merged shards differs from the unsharded run's:\n%s\nwant:\n%s", f, b, a)
		}
	}
}

// TestShardsInProcessesMergeByteIdentical runs a sweep as 1, 3 and 7
// shards, each shard a process of its own (all at once, as on a cluster),
// merges them in another, and checks the merged results.json — and the
// CSV and tables — are byte for byte those of the unsharded run.
func TestShardsInProcessesMergeByteIdentical(t *testing.T) {
	want := unsharded(t, smallSweep)
	for _, n := range []int{1, 3, 7} {
		t.Run(fmt.Sprintf("%d shards", n), func(t *testing.T) {
			shards := t.TempDir()
			var wg sync.WaitGroup
			errs := make([]error, n)
			outs := make([][]byte, n)
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					outs[i], errs[i] = self(t, "run", "--quiet", "--parallel", "1", "--shard", fmt.Sprintf("%d/%d", i, n), "--out", shards, smallSweep).CombinedOutput()
				}()
			}
			wg.Wait()
			runs := 0
			for i := range n {
				if errs[i] != nil {
					t.Fatalf("shard %d/%d: %v\n%s", i, n, errs[i], outs[i])
				}
				f, err := analysis.ReadShard(filepath.Join(shards, "small-sweep", analysis.ShardFileName(i, n)))
				if err != nil {
					t.Fatal(err)
				}
				runs += len(f.Results.Runs)
				if f.Provenance == nil || f.Provenance.Shard != fmt.Sprintf("%d/%d", i, n) || f.Cost <= 0 || f.Cost > f.TotalCost {
					t.Errorf("shard %d/%d: provenance %+v, cost %g of %g", i, n, f.Provenance, f.Cost, f.TotalCost)
				}
			}
			if runs != 24 {
				t.Errorf("the shards ran %d runs, want 24", runs)
			}
			merged := t.TempDir()
			if out, err := self(t, "merge", "--quiet", "--plots=false", "--out", merged, shards).CombinedOutput(); err != nil {
				t.Fatalf("merge: %v\n%s", err, out)
			}
			sameResults(t, want, filepath.Join(merged, "small-sweep"))
			p, err := analysis.ReadProvenance(filepath.Join(merged, "small-sweep"))
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Shards) != n || p.Runs != 24 || !strings.HasPrefix(p.Command, "tracebed merge ") || p.Shards[n-1].Shard != fmt.Sprintf("%d/%d", n-1, n) {
				t.Errorf("provenance: %d shards, %d runs, command %q", len(p.Shards), p.Runs, p.Command)
			}
			if report, err := os.ReadFile(filepath.Join(merged, "REPORT.md")); err != nil || !bytes.Contains(report, []byte(fmt.Sprintf("| shards | %d shards merged", n))) {
				t.Errorf("REPORT.md does not say it was merged from %d shards (%v)", n, err)
			}
			// --plots=false: no figure, not even for the report.
			if figs, _ := filepath.Glob(filepath.Join(merged, "small-sweep", "*.png")); len(figs) > 0 {
				t.Errorf("merge --plots=false drew %d figures (%s, ...)", len(figs), figs[0])
			}
		})
	}
}

// shardsOf runs the shards of spec in this process into a new directory
// (extra flags added to every shard) and returns it.
func shardsOf(t *testing.T, spec string, n int, extra ...string) string {
	t.Helper()
	dir := t.TempDir()
	for i := range n {
		args := append([]string{"run", "--quiet", "--shard", fmt.Sprintf("%d/%d", i, n), "--out", dir}, extra...)
		if code, _, stderr := run(t, append(args, spec)...); code != 0 {
			t.Fatalf("shard %d/%d: exit %d: %s", i, n, code, stderr)
		}
	}
	return dir
}

func shardPath(dir string, i, n int) string {
	return filepath.Join(dir, "small-incast", analysis.ShardFileName(i, n))
}

// TestMergeRefuses: shards of different sweeps, a missing shard and a
// shard given twice are errors (exit 2) that name what differs or which
// shard, and write nothing.
func TestMergeRefuses(t *testing.T) {
	const spec = "testdata/small-incast.yaml" // 4 runs
	a := shardsOf(t, spec, 3)
	seeds := shardsOf(t, spec, 3, "--seed", "7")
	two := shardsOf(t, spec, 2)
	// The same spec with another description: another spec hash.
	data, err := os.ReadFile(spec)
	if err != nil {
		t.Fatal(err)
	}
	edited := filepath.Join(t.TempDir(), "testdata", "small-incast.yaml")
	if err := os.MkdirAll(filepath.Dir(edited), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(edited, append(data, []byte("description: edited\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	other := shardsOf(t, edited, 3)
	// Another commit, written into a copy of shard 1.
	commitDir := t.TempDir()
	f, err := analysis.ReadShard(shardPath(a, 1, 3))
	if err != nil {
		t.Fatal(err)
	}
	f.Results.Commit = "feedfacecafe"
	if _, err := analysis.WriteShard(commitDir, f); err != nil {
		t.Fatal(err)
	}

	// The same spec path with other content.
	hashDir := t.TempDir()
	h := f2(t, shardPath(a, 2, 3))
	h.Results.SpecHash = strings.Repeat("0", 64)
	if _, err := analysis.WriteShard(hashDir, h); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name  string
		files []string
		want  []string
	}{
		{"missing", []string{shardPath(a, 0, 3), shardPath(a, 2, 3)}, []string{"small-incast: shard 1/3 is missing (have 2 of 3 shards)"}},
		{"two missing", []string{shardPath(a, 1, 3)}, []string{"shards 0/3, 2/3 are missing"}},
		{"mixed sweeps", []string{a, shardPath(seeds, 0, 3)}, []string{"seed differs"}},
		{"commit", []string{a, shardPath(commitDir, 1, 3)}, []string{"commit differs", `"feedfacecafe"`, shardPath(commitDir, 1, 3)}},
		{"seeds", []string{shardPath(a, 0, 3), shardPath(a, 1, 3), shardPath(seeds, 2, 3)}, []string{"seed differs", "has 1", "has 7"}},
		{"spec", []string{shardPath(a, 0, 3), shardPath(a, 1, 3), shardPath(other, 2, 3)}, []string{"spec differs"}},
		{"spec hash", []string{shardPath(a, 0, 3), shardPath(a, 1, 3), shardPath(hashDir, 2, 3)}, []string{"spec_hash differs"}},
		{"count", []string{shardPath(a, 0, 3), shardPath(two, 1, 2)}, []string{"shards of different sweeps", "shard 0/3", "shard 1/2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := t.TempDir()
			code, _, stderr := run(t, append([]string{"merge", "--quiet", "--out", out}, tt.files...)...)
			if code != exitBadInput {
				t.Errorf("exit %d, want %d: %s", code, exitBadInput, stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q lacks %q", stderr, w)
				}
			}
			if entries, _ := os.ReadDir(out); len(entries) > 0 {
				t.Errorf("a refused merge wrote %d files", len(entries))
			}
		})
	}
	// The same shard file found through two arguments is one shard.
	out := t.TempDir()
	if code, _, stderr := run(t, "merge", "--quiet", "--out", out, a, shardPath(a, 1, 3)); code != 0 {
		t.Errorf("merging a directory and a file in it: exit %d: %s", code, stderr)
	}
	// Two copies of one shard are two shards with one index.
	dup := t.TempDir()
	for _, d := range []string{"x", "y"} {
		if _, err := analysis.WriteShard(filepath.Join(dup, d), f2(t, shardPath(a, 1, 3))); err != nil {
			t.Fatal(err)
		}
	}
	code, _, stderr := run(t, "merge", "--quiet", "--out", t.TempDir(), a, dup)
	if code != exitBadInput || !strings.Contains(stderr, "shard 1/3 is given twice") {
		t.Errorf("exit %d: %s", code, stderr)
	}
	// Files that are not shards, and directories without any.
	code, _, stderr = run(t, "merge", "--out", t.TempDir(), t.TempDir())
	if code != exitBadInput || !strings.Contains(stderr, "no shard files") {
		t.Errorf("empty directory: exit %d: %s", code, stderr)
	}
	code, _, stderr = run(t, "merge", "--out", t.TempDir(), spec)
	if code != exitBadInput || !strings.Contains(stderr, "not a tracebed file") {
		t.Errorf("a spec as a shard: exit %d: %s", code, stderr)
	}
}

func f2(t *testing.T, path string) *analysis.ShardFile {
	t.Helper()
	f, err := analysis.ReadShard(path)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestMergeWaits: with --wait, merge waits for a shard that appears later,
// and names the one that never does.
func TestMergeWaits(t *testing.T) {
	const spec = "testdata/small-incast.yaml"
	src := shardsOf(t, spec, 2)
	dir := t.TempDir()
	if _, err := analysis.WriteShard(dir, f2(t, shardPath(src, 0, 2))); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := run(t, "merge", "--quiet", "--wait", "1500ms", "--out", t.TempDir(), dir)
	if code != exitBadInput || !strings.Contains(stderr, "shard 1/2 is missing") {
		t.Errorf("exit %d: %s", code, stderr)
	}
	code, _, stderr = run(t, "merge", "--quiet", "--wait", "1s", "--expect", "other", "--out", t.TempDir(), dir)
	if code != exitBadInput || !strings.Contains(stderr, "no shards of other") {
		t.Errorf("--expect: exit %d: %s", code, stderr)
	}
	go func() {
		time.Sleep(1500 * time.Millisecond)
		analysis.WriteShard(dir, f2(t, shardPath(src, 1, 2)))
	}()
	out := t.TempDir()
	if code, _, stderr := run(t, "merge", "--wait", "1m", "--expect", "small-incast", "--out", out, dir); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	sameResults(t, unsharded(t, spec), filepath.Join(out, "small-incast"))
}

func TestShardFlag(t *testing.T) {
	for _, bad := range []string{"3/3", "-1/2", "1", "a/b", "0/0"} {
		code, _, stderr := run(t, "run", "--quiet", "--out", t.TempDir(), "--shard", bad, "testdata/small-incast.yaml")
		if code != exitBadInput || !strings.Contains(stderr, "--shard") {
			t.Errorf("--shard %s: exit %d: %s", bad, code, stderr)
		}
	}
	// More shards than runs: the extra shards run nothing, and say so.
	dir := t.TempDir()
	code, stdout, stderr := run(t, "run", "--quiet", "--out", dir, "--shard", "5/6", "testdata/small-incast.yaml")
	if code != 0 || !strings.Contains(stdout, "0 of 4 runs") {
		t.Errorf("exit %d: %s%s", code, stdout, stderr)
	}
}
