// Package golden compares what a test produces with a golden file under
// testdata/, or rewrites the file when the test runs with -update (each
// test package declares its own -update flag and passes its value).
package golden

import (
	"bytes"
	"fmt"
	"os"
	"testing"
)

// Check compares got with the file at path. With update it writes got to
// path instead. The failure names the first differing line and how to
// accept the change (go test PKG -update).
func Check(t testing.TB, path string, got []byte, update bool, pkg string) {
	t.Helper()
	if update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test %s -update to create it)", err, pkg)
		return // for a testing.TB whose Fatalf returns
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from what the code produces now; if the change is intended, run go test %s -update and review the diff\n%s", path, pkg, FirstDiff(want, got))
	}
}

// FirstDiff describes the first line where a and b differ, or returns ""
// when they are equal.
func FirstDiff(a, b []byte) string {
	la, lb := bytes.Split(a, []byte("\n")), bytes.Split(b, []byte("\n"))
	for i := range max(len(la), len(lb)) {
		var x, y []byte
		if i < len(la) {
			x = la[i]
		}
		if i < len(lb) {
			y = lb[i]
		}
		if !bytes.Equal(x, y) {
			return fmt.Sprintf("line %d:\n- %s\n+ %s", i+1, x, y)
		}
	}
	return ""
}
