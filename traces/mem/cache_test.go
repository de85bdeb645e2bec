package memtrace

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// replay reads a prepared trace whole.
func replay(t *testing.T, p *Prepared) []Access {
	t.Helper()
	r, c, err := p.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	acc, err := ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return acc
}

func writeFile(t *testing.T, dir, name string, r io.Reader) string {
	t.Helper()
	path := filepath.Join(dir, name)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, r); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCachePreparesOnce(t *testing.T) {
	src, cacheDir := t.TempDir(), t.TempDir()
	c := Cache{Dir: cacheDir}
	path := writeFile(t, src, "big.lackey", &SyntheticLackey{Size: 3 * SmallTrace, Pages: 300, Seed: 7})
	f, err := OSFile(path)
	if err != nil {
		t.Fatal(err)
	}
	opts := DefaultLackeyOptions()
	p, err := c.Prepare(f, opts)
	if err != nil {
		t.Fatal(err)
	}
	if p.Format != Lackey || p.Cached == "" || !strings.HasPrefix(p.Cached, cacheDir) {
		t.Fatalf("prepared %+v: want a lackey trace converted into %s", p, cacheDir)
	}
	data, _ := os.ReadFile(path)
	_, whole, err := ImportLackey(path, bytes.NewReader(data), opts)
	if err != nil {
		t.Fatal(err)
	}
	if got := replay(t, p); !slices.Equal(got, whole) {
		t.Fatalf("the cached binary form replays %d accesses, the recording has %d", len(got), len(whole))
	}
	want, _ := Summarize(NewSliceSource(whole))
	if p.Stats != want {
		t.Errorf("stats %v, want %v", p.Stats, want)
	}
	// A second run finds it: the entry is not rewritten.
	fi, _ := os.Stat(p.Cached)
	old := fi.ModTime().Add(-time.Hour)
	os.Chtimes(p.Cached, old, old)
	p2, err := c.Prepare(f, opts)
	if err != nil {
		t.Fatal(err)
	}
	if fi2, _ := os.Stat(p2.Cached); p2.Cached != p.Cached || !fi2.ModTime().Equal(old) || p2.Stats != p.Stats {
		t.Error("the second Prepare converted the trace again")
	}
	// Other options, another entry; a damaged sidecar, a new conversion.
	opts.NsPerInstruction = 1
	p3, err := c.Prepare(f, opts)
	if err != nil {
		t.Fatal(err)
	}
	if p3.Cached == p.Cached || p3.Stats.Compute == p.Stats.Compute {
		t.Errorf("other import options reused the entry %s", p3.Cached)
	}
	side := strings.TrimSuffix(p.Cached, ".memtrace") + ".json"
	if err := os.WriteFile(side, []byte("{garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	p4, err := c.Prepare(f, DefaultLackeyOptions())
	if err != nil || p4.Stats != p.Stats {
		t.Errorf("after a damaged sidecar: %v, stats %v", err, p4.Stats)
	}
}

func TestCacheBinaryAndSmall(t *testing.T) {
	src, cacheDir := t.TempDir(), t.TempDir()
	c := Cache{Dir: cacheDir}
	// A large binary trace replays from its own file; only its
	// statistics go to the cache.
	var bin bytes.Buffer
	if _, err := Convert(&bin, "s.lackey", &SyntheticLackey{Size: 40 * SmallTrace, Pages: 1000, Seed: 2}, DefaultLackeyOptions()); err != nil {
		t.Fatal(err)
	}
	if bin.Len() <= SmallTrace {
		t.Fatalf("binary trace of %d bytes is not large", bin.Len())
	}
	path := writeFile(t, src, "t.memtrace", bytes.NewReader(bin.Bytes()))
	f, _ := OSFile(path)
	p, err := c.Prepare(f, DefaultLackeyOptions())
	if err != nil {
		t.Fatal(err)
	}
	_, direct, _ := Open("t.memtrace", bin.Bytes())
	want, _ := ReadAll(direct)
	if p.Format != Binary || p.Cached != "" || !slices.Equal(replay(t, p), want) {
		t.Errorf("large binary: %+v", p)
	}
	if entries, _ := filepath.Glob(filepath.Join(cacheDir, "*.json")); len(entries) != 1 {
		t.Errorf("cache holds %v, want one sidecar", entries)
	}
	// Small traces are converted in memory: the cache stays as it was.
	p, err = c.Prepare(BytesFile("two.memtxt", []byte("pages 2\nW 0 5ns\nR 1\n")), DefaultLackeyOptions())
	if err != nil {
		t.Fatal(err)
	}
	if p.Cached != "" || p.Stats.Accesses != 2 || p.Header.Pages != 2 {
		t.Errorf("small text: %+v", p)
	}
	if entries, _ := os.ReadDir(cacheDir); len(entries) != 1 {
		t.Errorf("a small trace wrote to the cache: %v", entries)
	}
	// Errors name the file and line.
	if _, err := c.Prepare(BytesFile("bad.memtxt", []byte("W 1\nW 0b1\n")), DefaultLackeyOptions()); err == nil || !strings.Contains(err.Error(), "bad.memtxt:2") {
		t.Errorf("bad text trace: %v", err)
	}
}

func TestDefaultCacheDir(t *testing.T) {
	t.Setenv(CacheDirEnv, "/some/where")
	if d := DefaultCacheDir(); d != "/some/where" {
		t.Errorf("with %s set: %s", CacheDirEnv, d)
	}
	t.Setenv(CacheDirEnv, "")
	if d := DefaultCacheDir(); !strings.HasSuffix(d, filepath.Join("tracebed", "traces")) {
		t.Errorf("default: %s", d)
	}
}
