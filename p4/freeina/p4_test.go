package freeina

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/prototext"
)

// sourceConfig is the configuration freeina.p4 is generated for: the
// ready star's 8192 aggregators of 64 values, as slots of DefaultK.
var sourceConfig = Config{K: DefaultK, Slots: SlotsFor(8192, DefaultK)}

// TestP4SourceUpToDate keeps freeina.p4 and testdata/p4info.txtpb (the Go
// twin's P4Info, for review) in step with their generators.
func TestP4SourceUpToDate(t *testing.T) {
	src, err := P4Source(sourceConfig)
	if err != nil {
		t.Fatal(err)
	}
	info, err := P4Info(sourceConfig)
	if err != nil {
		t.Fatal(err)
	}
	text, err := prototext.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(info)
	if err != nil {
		t.Fatal(err)
	}
	// prototext output is deliberately unstable in whitespace; normalise.
	text = normalizeText(text)
	for _, f := range []struct {
		path string
		data []byte
	}{{"freeina.p4", src}, {"testdata/p4info.txtpb", text}} {
		if *update {
			if err := os.WriteFile(f.path, f.data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got, err := os.ReadFile(f.path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, f.data) {
			t.Errorf("%s is not what its generator makes: run go test ./p4/freeina -run P4Source -update", f.path)
		}
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

// normalizeText joins the fields of every line of prototext output with
// one space, which prototext's deliberately unstable spacing varies.
func normalizeText(b []byte) []byte {
	var out bytes.Buffer
	for _, line := range bytes.Split(b, []byte("\n")) {
		out.Write(bytes.Join(bytes.Fields(line), []byte(" ")))
		out.WriteByte('\n')
	}
	return out.Bytes()
}
