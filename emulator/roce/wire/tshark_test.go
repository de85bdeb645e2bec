package wire_test

import (
	"context"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/tracebed/tracebed/emulator/roce/tsharkcheck"
)

// vectorFrames reads the frames of testdata/vectors.txt.
func vectorFrames(t *testing.T) [][]byte {
	data, err := os.ReadFile(filepath.Join("testdata", "vectors.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var frames [][]byte
	for _, line := range strings.Split(string(data), "\n") {
		if h, ok := strings.CutPrefix(line, "frame: "); ok {
			b, err := hex.DecodeString(h)
			if err != nil {
				t.Fatal(err)
			}
			frames = append(frames, b)
		}
	}
	return frames
}

func writePcap(t *testing.T, frames [][]byte) string {
	path := filepath.Join(t.TempDir(), "vectors.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := pcapgo.NewWriter(f)
	if err := w.WriteFileHeader(65535, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	for i, b := range frames {
		ci := gopacket.CaptureInfo{Timestamp: time.Unix(int64(i), 0), CaptureLength: len(b), Length: len(b)}
		if err := w.WritePacket(ci, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestVectorsTshark decodes every packet vector with tshark's InfiniBand
// dissector: no malformed packet, the opcode tshark sees is the vector's,
// and the ICRC tshark locates is the one recomputed from the bytes. A
// corrupted copy must fail the same check.
func TestVectorsTshark(t *testing.T) {
	if _, err := tsharkcheck.Tshark(); err != nil {
		t.Skip(err)
	}
	frames := vectorFrames(t)
	r, err := tsharkcheck.Check(context.Background(), writePcap(t, frames))
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() || r.RoCE != len(frames) {
		t.Fatalf("tshark: %v", r)
	}
	t.Logf("tshark: %v", r)
	bad := append([]byte(nil), frames[0]...)
	bad[len(bad)-1] ^= 1
	r, err = tsharkcheck.Check(context.Background(), writePcap(t, [][]byte{bad}))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.ICRCErrors) != 1 {
		t.Fatalf("a corrupted ICRC passed: %v", r)
	}
}
