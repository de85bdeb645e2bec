package golden

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// recorder is a testing.TB that records failures instead of failing.
type recorder struct {
	testing.TB
	failed bool
	msg    string
}

func (r *recorder) Helper()                   {}
func (r *recorder) Errorf(f string, a ...any) { r.failed, r.msg = true, f }
func (r *recorder) Fatalf(f string, a ...any) { r.failed, r.msg = true, f }
func (r *recorder) Fatal(a ...any)            { r.failed = true }

func TestCheck(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.golden")
	r := &recorder{TB: t}
	Check(r, path, []byte("a\nb\n"), false, "./x")
	if !r.failed || !strings.Contains(r.msg, "-update to create it") {
		t.Errorf("missing file: failed %v, %q", r.failed, r.msg)
	}
	r = &recorder{TB: t}
	Check(r, path, []byte("a\nb\n"), true, "./x")
	if data, err := os.ReadFile(path); r.failed || err != nil || string(data) != "a\nb\n" {
		t.Errorf("update wrote %q, %v", data, err)
	}
	r = &recorder{TB: t}
	Check(r, path, []byte("a\nb\n"), false, "./x")
	if r.failed {
		t.Error("equal output failed")
	}
	r = &recorder{TB: t}
	Check(r, path, []byte("a\nc\n"), false, "./x")
	if !r.failed {
		t.Error("different output passed")
	}
}

func TestFirstDiff(t *testing.T) {
	if d := FirstDiff([]byte("a\nb\nc"), []byte("a\nx\nc")); d != "line 2:\n- b\n+ x" {
		t.Errorf("FirstDiff = %q", d)
	}
	if d := FirstDiff([]byte("a\n"), []byte("a\n")); d != "" {
		t.Errorf("equal: %q", d)
	}
	if d := FirstDiff([]byte("a"), []byte("a\nb")); d != "line 2:\n- \n+ b" {
		t.Errorf("longer: %q", d)
	}
}
