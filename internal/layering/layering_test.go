package layering

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

const module = "github.com/tracebed/tracebed"

// TestCheck: each kind of violation is found, and allowed imports pass.
func TestCheck(t *testing.T) {
	m := func(rel string) string { return module + "/" + rel }
	for _, tc := range []struct {
		name string
		pkg  Package
		want string // substring of the one violation; "" for none
	}{
		{"engine below data planes", Package{ImportPath: m("emulator/sim"), Imports: []string{m("emulator"), m("topologies"), m("internal/units"), "fmt"}}, ""},
		{"engine imports a data plane", Package{ImportPath: m("emulator/sim"), Imports: []string{m("p4/fwd")}}, "layer engine may import"},
		{"engine test imports a data plane", Package{ImportPath: m("emulator/switch"), XTestImports: []string{m("p4/programs")}}, "test imports " + m("p4/programs")},
		{"engine imports a policy", Package{ImportPath: m("emulator/testbed"), TestImports: []string{m("systems/atp")}}, "not systems"},
		{"data imports a workload", Package{ImportPath: m("traces/jobs"), Imports: []string{m("workloads/training")}}, "layer data may import"},
		{"data imports the engine", Package{ImportPath: m("topologies"), Imports: []string{m("emulator/frame")}}, "not engine"},
		{"workload depends on plotting", Package{ImportPath: m("workloads/incast"), Deps: []string{"gonum.org/v1/plot/vg"}}, "must not depend on gonum.org/v1/plot"},
		{"reports may plot", Package{ImportPath: m("analysis/figure"), Imports: []string{m("analysis")}, Deps: []string{"gonum.org/v1/plot"}}, ""},
		{"schema imports reports", Package{ImportPath: m("analysis"), Imports: []string{m("analysis/figure")}}, "not reports"},
		{"experiments reach the command", Package{ImportPath: m("workloads/training"), Imports: []string{m("cmd/tracebed")}}, "not cmd"},
		{"command imports all", Package{ImportPath: m("cmd/tracebed"), Imports: []string{m("workloads/training"), m("analysis/figure"), m("p4/programs")}}, ""},
		{"package in no layer", Package{ImportPath: m("newthing")}, "in no layer"},
		{"import of a package in no layer", Package{ImportPath: m("cmd/tracebed"), Imports: []string{m("newthing")}}, "in no layer"},
		{"other modules are not checked", Package{ImportPath: "example.com/x", Imports: []string{m("cmd/tracebed")}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vs := Check(module, []Package{tc.pkg}, Tracebed())
			switch {
			case tc.want == "" && len(vs) != 0:
				t.Errorf("violations %v, want none", vs)
			case tc.want != "" && (len(vs) != 1 || !strings.Contains(vs[0].String(), tc.want)):
				t.Errorf("violations %v, want one with %q", vs, tc.want)
			}
		})
	}
}

// TestModule checks tracebed's own import graph, as 'go list' sees it for
// Linux, macOS and Windows (files behind build tags differ).
func TestModule(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	root := filepath.Join("..", "..")
	for _, goos := range []string{"linux", "darwin", "windows"} {
		t.Run(goos, func(t *testing.T) {
			cmd := exec.Command(goTool, "list", "-e", "-json=ImportPath,Imports,TestImports,XTestImports,Deps,Error", "./...")
			cmd.Dir = root
			cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH=amd64", "CGO_ENABLED=0", "GOFLAGS=-mod=mod")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("go list: %v\n%s", err, stderr.String())
			}
			pkgs := decode(t, out)
			if len(pkgs) < 30 {
				t.Fatalf("go list found %d packages of the module; run from the module", len(pkgs))
			}
			for _, v := range Check(module, pkgs, Tracebed()) {
				t.Error(v)
			}
		})
	}
}

// decode reads the stream of JSON objects 'go list -json' prints; a
// package that failed to load fails the test.
func decode(t *testing.T, out []byte) []Package {
	t.Helper()
	var pkgs []Package
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			Package
			Error *struct{ Err string }
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if p.Error != nil {
			t.Errorf("%s: %s", p.ImportPath, p.Error.Err)
		}
		pkgs = append(pkgs, p.Package)
	}
	return pkgs
}
