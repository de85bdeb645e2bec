package incast

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tracebed/tracebed/internal/cputime"
	"github.com/tracebed/tracebed/internal/units"
)

// ns3Source is the ns-3 peer of the incast: the same topology, rates,
// buffer and senders, at the device level (ns3/incast-device.cc).
const ns3Source = "ns3/incast-device.cc"

// ns3Libs are the ns-3 modules the peer links with. (pkg-config's --libs
// for them also names GSL, which Debian's libns3-dev does not pull in, so
// only --cflags comes from pkg-config.)
var ns3Libs = []string{"-lns3-point-to-point", "-lns3-network", "-lns3-core"}

// buildNS3 compiles the peer once per source version into the user's
// cache directory and returns its path, or skips b saying what is missing.
func buildNS3(b *testing.B) string {
	src, err := os.ReadFile(ns3Source)
	if err != nil {
		b.Fatal(err)
	}
	for _, tool := range []string{"g++", "pkg-config"} {
		if _, err := exec.LookPath(tool); err != nil {
			b.Skipf("ns-3 comparison skipped: %s is not installed (apt-get install -y ns3 libns3-dev g++ pkg-config)", tool)
		}
	}
	cflags, err := exec.Command("pkg-config", "--cflags", "ns3-point-to-point", "ns3-network", "ns3-core").Output()
	if err != nil {
		b.Skip("ns-3 comparison skipped: ns-3's development files are not installed (apt-get install -y ns3 libns3-dev)")
	}
	sum := sha256.Sum256(src)
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	bin := filepath.Join(cache, "tracebed", "ns3", "incast-device-"+hex.EncodeToString(sum[:6]))
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		b.Fatal(err)
	}
	abs, err := filepath.Abs(ns3Source)
	if err != nil {
		b.Fatal(err)
	}
	tmp := bin + ".tmp"
	args := append([]string{"-O2", "-o", tmp, abs}, strings.Fields(string(cflags))...)
	cmd := exec.Command("g++", append(args, ns3Libs...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("building the ns-3 peer: %v\n%s", err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		b.Fatal(err)
	}
	return bin
}

// ns3Result is what the peer printed, and what its run cost.
type ns3Result struct {
	delivered, dropped, events uint64
	completionPS               int64
	cpu                        time.Duration
}

func runNS3(b *testing.B, bin string, p Params, pol Policy) ns3Result {
	cmd := exec.Command(bin, fmt.Sprint(p.Senders), fmt.Sprint(p.Packets), fmt.Sprint(int64(p.Size)),
		fmt.Sprint(int64(p.Rate)), fmt.Sprint(time.Duration(p.Delay).Nanoseconds()), fmt.Sprint(int64(pol.Buffer)))
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		b.Fatalf("%s: %v\n%s", cmd, err, stderr.String())
	}
	var r ns3Result
	if _, err := fmt.Sscanf(out.String(), "delivered=%d dropped=%d completion_ps=%d events=%d", &r.delivered, &r.dropped, &r.completionPS, &r.events); err != nil {
		b.Fatalf("ns-3 peer printed %q: %v", out.String(), err)
	}
	r.cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	return r
}

// BenchmarkNS3Incast runs the 10^6-frame incast of BenchmarkIncastMillion
// on tracebed's sim and on ns-3 3.37's device-level program, one after the
// other in each iteration, and reports both rates in events per CPU-second
// and their ratio (speedup_vs_ns3: ns-3's CPU time over tracebed's for the
// same incast). It needs g++ and ns-3's development files, and skips
// without them. Both must deliver and drop what the closed form says;
// ns-3 may deliver one frame fewer, since it breaks the tie between a
// frame arriving at the switch and the switch finishing one at the same
// instant the other way (see docs/sim.md).
func BenchmarkNS3Incast(b *testing.B) {
	bin := buildNS3(b)
	p := Params{Senders: 16, Packets: 62_500, Size: 1500, Rate: 100 * units.Gbps, Delay: units.Duration(100)}
	pol := Policy{Buffer: units.MiB}
	want := closedForm(p, pol)
	var ns3CPU, ourCPU time.Duration
	var ns3Events, ourEvents uint64
	for b.Loop() {
		r := runNS3(b, bin, p, pol)
		if d := int(r.delivered) - want.delivered; d < -1 || d > 0 || int(r.delivered+r.dropped) != p.Senders*p.Packets {
			b.Fatalf("ns-3 delivered %d and dropped %d; the closed form says %d and %d", r.delivered, r.dropped, want.delivered, want.drops)
		}
		ns3CPU += r.cpu
		ns3Events += r.events

		start := cputime.Process()
		o, err := Simulate(context.Background(), p, pol, 1, nil)
		if err != nil {
			b.Fatal(err)
		}
		ourCPU += cputime.Since(start)
		if o.Delivered != want.delivered || o.Drops != want.drops {
			b.Fatalf("tracebed delivered %d and dropped %d; the closed form says %d and %d", o.Delivered, o.Drops, want.delivered, want.drops)
		}
		ourEvents += o.Events
	}
	b.ReportMetric(float64(ourEvents)/ourCPU.Seconds(), "events/cpu-s")
	b.ReportMetric(float64(ns3Events)/ns3CPU.Seconds(), "ns3_events/cpu-s")
	b.ReportMetric(ns3CPU.Seconds()/ourCPU.Seconds(), "speedup_vs_ns3")
}
