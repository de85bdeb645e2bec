package memtrace

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/tracebed/tracebed/internal/testproc"
)

// TestLackeyRecordsRealProgram compiles testdata/stride.c, records it with
// valgrind's lackey tool and checks that the imported trace shows what the
// program does: 64 consecutive pages written in order, then read in order.
func TestLackeyRecordsRealProgram(t *testing.T) {
	valgrind, err := exec.LookPath("valgrind")
	if err != nil {
		t.Skip("valgrind is not installed: cannot record a real program (apt-get install valgrind)")
	}
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc is not installed: cannot build the program to record")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "stride")
	if out, err := testproc.Command(t, cc, "-O1", "-o", bin, filepath.Join("testdata", "stride.c")).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	log := filepath.Join(dir, "stride.lackey")
	cmd := testproc.Command(t, valgrind, "--tool=lackey", "--trace-mem=yes", "--log-file="+log, bin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("valgrind: %v\n%s", err, out)
	}
	f, err := os.Open(log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	opts := DefaultLackeyOptions()
	opts.KeepAddresses = true
	_, acc, err := ImportLackey(log, f, opts)
	if err != nil {
		t.Fatal(err)
	}
	const pages = 64
	run := func(from int, write bool) int {
		for i := from; i+pages <= len(acc); i++ {
			ok := true
			for k := range pages {
				a := acc[i+k]
				if a.Write != write || a.Page != acc[i].Page+uint64(k) {
					ok = false
					break
				}
			}
			if ok {
				return i
			}
		}
		return -1
	}
	w := run(0, true)
	if w < 0 {
		t.Fatalf("no run of %d writes to consecutive pages in %d accesses", pages, len(acc))
	}
	r := run(w+pages, false)
	if r < 0 || acc[r].Page != acc[w].Page {
		t.Fatalf("the %d pages written from access %d are not read back in order", pages, w)
	}
	t.Logf("%d page accesses; buffer pages %#x.. written at access %d, read at %d", len(acc), acc[w].Page, w, r)
}
