package freeina

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	"github.com/tracebed/tracebed/emulator/p4rt"
	"google.golang.org/protobuf/encoding/prototext"
)

// sourceConfig is the configuration freeina.p4 is generated for: the
// ready star's 8192 aggregators of 64 values, as slots of DefaultK.
var sourceConfig = Config{K: DefaultK, Slots: SlotsFor(8192, DefaultK)}

// TestP4SourceUpToDate keeps freeina.p4 the output of its generator.
func TestP4SourceUpToDate(t *testing.T) {
	src, err := P4Source(sourceConfig)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile("freeina.p4", src, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile("freeina.p4")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, src) {
		t.Errorf("freeina.p4 is not what its generator makes: run go test ./p4/freeina -run P4Source -update")
	}
}

// TestP4InfoIsP4cs checks the Go twin's P4Info for freeina.p4's
// configuration against freeina.p4info.txtpb, the P4Info p4c-bm2-ss writes
// for freeina.p4 (kept in step with the compiler by TestCommittedP4Info in
// p4/programs, where p4c is installed): the same objects, shapes and ids.
func TestP4InfoIsP4cs(t *testing.T) {
	info, err := P4Info(sourceConfig)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("freeina.p4info.txtpb")
	if err != nil {
		t.Fatal(err)
	}
	p4c := &p4configv1.P4Info{}
	if err := prototext.Unmarshal(b, p4c); err != nil {
		t.Fatalf("freeina.p4info.txtpb: %v", err)
	}
	if err := errors.Join(p4rt.SameObjects(info, p4c), p4rt.SameIDs(info, p4c)); err != nil {
		t.Errorf("the Go twin's P4Info and p4c's differ:\n%v", err)
	}
	if got := p4c.GetPkgInfo().GetName(); got != ProgramName {
		t.Errorf("p4c's P4Info names the program %q, want %q (@pkginfo)", got, ProgramName)
	}
}

// TestP4SourceNames checks that every object of the Go twin's P4Info is
// declared in freeina.p4 under the name p4c will give it: the last
// component of the name, in its control (or at top level).
func TestP4SourceNames(t *testing.T) {
	src, err := P4Source(sourceConfig)
	if err != nil {
		t.Fatal(err)
	}
	info, err := P4Info(sourceConfig)
	if err != nil {
		t.Fatal(err)
	}
	text := string(src)
	var names []string
	for _, tb := range info.GetTables() {
		names = append(names, tb.GetPreamble().GetName())
	}
	for _, r := range info.GetRegisters() {
		names = append(names, r.GetPreamble().GetName())
	}
	for _, c := range info.GetCounters() {
		names = append(names, c.GetPreamble().GetName())
	}
	for _, a := range info.GetActions() {
		names = append(names, a.GetPreamble().GetName())
		for _, p := range a.GetParams() {
			if !strings.Contains(text, " "+p.GetName()+",") && !strings.Contains(text, " "+p.GetName()+")") {
				t.Errorf("action %s: parameter %s not in freeina.p4", a.GetPreamble().GetName(), p.GetName())
			}
		}
	}
	for _, n := range names {
		if n == "NoAction" {
			continue
		}
		short := n[strings.LastIndexByte(n, '.')+1:]
		if !strings.Contains(text, " "+short+"(") && !strings.Contains(text, " "+short+";") && !strings.Contains(text, " "+short+" {") {
			t.Errorf("%s is not declared in freeina.p4", n)
		}
	}
}
