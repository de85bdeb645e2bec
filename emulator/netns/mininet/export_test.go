package mininet

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tracebed/tracebed/topologies"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// TestExportGolden pins the scripts of the ready topologies.
func TestExportGolden(t *testing.T) {
	for _, name := range []string{"star", "leafspine"} {
		t.Run(name, func(t *testing.T) {
			top, err := topologies.Open(name)
			if err != nil {
				t.Fatal(err)
			}
			got := Export(top)
			golden := filepath.Join("testdata", name+".py")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("the script of %s differs from %s (go test -update rewrites it):\n%s", name, golden, got)
			}
		})
	}
}

// TestExportCarriesTheTopology: the topology embedded in a script parses
// back to the same network, and every link, host and switch of it appears.
func TestExportCarriesTheTopology(t *testing.T) {
	top, err := topologies.Open("fattree-k4")
	if err != nil {
		t.Fatal(err)
	}
	s := string(Export(top))
	i := strings.Index(s, "TOPOLOGY = '''\\\n")
	j := strings.LastIndex(s, "'''")
	if i < 0 || j < i {
		t.Fatal("no topology in the script")
	}
	back, err := topologies.Parse("embedded", []byte(s[i+len("TOPOLOGY = '''\\\n"):j]))
	if err != nil {
		t.Fatal(err)
	}
	if back.Summary() != top.Summary() || len(back.Links) != len(top.Links) {
		t.Errorf("embedded topology: %s, want %s", back.Summary(), top.Summary())
	}
	if k := strings.Count(s, "self.addLink("); k != len(top.Links) {
		t.Errorf("%d links in the script, want %d", k, len(top.Links))
	}
	if k := strings.Count(s, "self.addHost("); k != len(top.Hosts()) {
		t.Errorf("%d hosts in the script, want %d", k, len(top.Hosts()))
	}
	if k := strings.Count(s, "self.addSwitch("); k != len(top.Switches()) {
		t.Errorf("%d switches in the script, want %d", k, len(top.Switches()))
	}
}

func TestPyIdent(t *testing.T) {
	for _, tc := range []struct{ name, mod, class string }{
		{"star", "star", "Star"},
		{"fattree-k4", "fattree_k4", "FattreeK4"},
		{"8hosts", "t8hosts", "T8hosts"},
		{"--", "topology", "topology"},
	} {
		if got := pyIdent(tc.name, false); got != tc.mod {
			t.Errorf("module name of %q: %q, want %q", tc.name, got, tc.mod)
		}
		if got := pyIdent(tc.name, true); got != tc.class {
			t.Errorf("class name of %q: %q, want %q", tc.name, got, tc.class)
		}
	}
	if got := pyString("a'''b\\c"); got != "'''\\\na\\'\\'\\'b\\\\c'''" {
		t.Errorf("pyString: %s", got)
	}
}
