package layering

import (
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPortableUnion guards the Makefile's portable target, which vets the
// module for darwin/arm64 and windows/amd64 and only lists its packages
// for darwin/amd64: that is enough while every Go file darwin/amd64
// builds is built by darwin/arm64 or by windows/amd64 too (no file is
// tagged darwin and amd64 together).
func TestPortableUnion(t *testing.T) {
	ctx := func(goos, goarch string) build.Context {
		c := build.Default
		c.GOOS, c.GOARCH, c.CgoEnabled = goos, goarch, false
		return c
	}
	intel, arm, windows := ctx("darwin", "amd64"), ctx("darwin", "arm64"), ctx("windows", "amd64")
	root := filepath.Join("..", "..")
	n := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" || name == "bin" || name == "results") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		dir, name := filepath.Split(path)
		match := func(c build.Context) bool {
			ok, err := c.MatchFile(dir, name)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			return ok
		}
		n++
		if match(intel) && !match(arm) && !match(windows) {
			t.Errorf("%s builds on darwin/amd64 only among the portable targets: vet it there (Makefile PORTABLE) or tag it otherwise", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 100 {
		t.Fatalf("walked %d Go files from %s; want the module's", n, root)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("%s is not the module's root: %v", root, err)
	}
}
