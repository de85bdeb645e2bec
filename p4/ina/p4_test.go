package ina

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/encoding/prototext"
)

var update = flag.Bool("update", false, "rewrite ina.p4, testdata/p4info.txtpb and the packet vectors")

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

// TestP4InfoGolden records the Go twin's P4Info (names, widths, sizes) for
// review; the bmv2 test checks p4c's P4Info for ina.p4 against it by name.
func TestP4InfoGolden(t *testing.T) {
	info, err := P4Info(Config{K: DefaultK, Aggregators: 8192})
	if err != nil {
		t.Fatal(err)
	}
	b, err := prototext.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(info)
	if err != nil {
		t.Fatal(err)
	}
	// prototext output is deliberately unstable in whitespace; normalise.
	golden(t, "testdata/p4info.txtpb", normalizeText(b))
}

func normalizeText(b []byte) []byte {
	var out bytes.Buffer
	for _, line := range bytes.Split(b, []byte("\n")) {
		out.Write(bytes.Join(bytes.Fields(line), []byte(" ")))
		out.WriteByte('\n')
	}
	return out.Bytes()
}
