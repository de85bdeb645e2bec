package p4_test

import (
	"bytes"
	"os"
	"testing"

	"github.com/tracebed/tracebed/p4"
	"github.com/tracebed/tracebed/p4/programs"
)

// TestSources: every program the switches run has its P4 source built in,
// identical to the file in the repository, and carries it to bmv2
// (dataplane.Program.Source).
func TestSources(t *testing.T) {
	reg, err := programs.Registry()
	if err != nil {
		t.Fatal(err)
	}
	if got := reg.Default().Name; got != "fwd" {
		t.Errorf("default program %s, want fwd (plain forwarding)", got)
	}
	for _, name := range reg.Names() {
		src, err := p4.Source(name)
		if err != nil {
			t.Fatal(err)
		}
		file, err := os.ReadFile(name + "/" + name + ".p4")
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(src, file) || !bytes.Contains(src, []byte("V1Switch(")) {
			t.Errorf("%s: built-in source differs from %s.p4", name, name)
		}
		if !bytes.Equal(reg.Lookup(name).Source, file) {
			t.Errorf("%s: the program's Source differs from %s.p4", name, name)
		}
	}
	if _, err := p4.Source("nosuch"); err == nil {
		t.Error("source of nosuch")
	}
}
