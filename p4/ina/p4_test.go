package ina

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	"github.com/tracebed/tracebed/emulator/p4rt"
	"google.golang.org/protobuf/encoding/prototext"
)

var update = flag.Bool("update", false, "rewrite ina.p4 and the packet vectors")

// golden compares got with the file at path, or rewrites it with -update.
func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./p4/ina -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is out of date: run go test ./p4/ina -update and review the diff", path)
	}
}

// TestP4SourceUpToDate keeps ina.p4 the output of its generator.
func TestP4SourceUpToDate(t *testing.T) {
	src, err := P4Source(Config{K: DefaultK, Aggregators: 8192})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "ina.p4", src)
}

// TestP4InfoIsP4cs checks the Go twin's P4Info for ina.p4's configuration
// against ina.p4info.txtpb, the P4Info p4c-bm2-ss writes for ina.p4 (kept
// in step with the compiler by TestCommittedP4Info in p4/programs, where
// p4c is installed): the same objects, shapes and ids, so that a
// controller may load either P4Info on either switch.
func TestP4InfoIsP4cs(t *testing.T) {
	info, err := P4Info(Config{K: DefaultK, Aggregators: 8192})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("ina.p4info.txtpb")
	if err != nil {
		t.Fatal(err)
	}
	p4c := &p4configv1.P4Info{}
	if err := prototext.Unmarshal(b, p4c); err != nil {
		t.Fatalf("ina.p4info.txtpb: %v", err)
	}
	if err := errors.Join(p4rt.SameObjects(info, p4c), p4rt.SameIDs(info, p4c)); err != nil {
		t.Errorf("the Go twin's P4Info and p4c's differ:\n%v", err)
	}
	if got := p4c.GetPkgInfo().GetName(); got != ProgramName {
		t.Errorf("p4c's P4Info names the program %q, want %q (@pkginfo)", got, ProgramName)
	}
}
