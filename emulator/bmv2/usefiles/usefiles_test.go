package usefiles

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestRoundTrip writes inputs and reads them back as if they were outputs:
// the same frames, per port, in order.
func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	frames := []Frame{{1, []byte("a")}, {2, []byte("bb")}, {1, []byte("ccc")}}
	if err := WriteInputs(dir, 3, frames, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	for p := 1; p <= 3; p++ {
		if err := os.Rename(filepath.Join(dir, Iface(p)+"_in.pcap"), filepath.Join(dir, Iface(p)+"_out.pcap")); err != nil {
			t.Fatal(err)
		}
	}
	got, err := ReadOutputs(dir, 4) // port 4 has no file
	if err != nil {
		t.Fatal(err)
	}
	if len(got[1]) != 2 || !bytes.Equal(got[1][1], []byte("ccc")) || len(got[2]) != 1 || len(got[3]) != 0 || len(got[4]) != 0 {
		t.Fatalf("read back %v", got)
	}
	if err := WriteInputs(dir, 2, []Frame{{3, nil}}, time.Millisecond); err == nil {
		t.Error("a frame on a port beyond the count was accepted")
	}
	if a := Args(2); len(a) != 4 || a[1] != "1@p1" || a[3] != "2@p2" {
		t.Errorf("Args(2) = %v", a)
	}
}
