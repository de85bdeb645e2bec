package netnstb

import (
	"context"
	"testing"
	"time"

	"github.com/tracebed/tracebed/emulator/netns"
	"github.com/tracebed/tracebed/emulator/testbed"
	"github.com/tracebed/tracebed/topologies"
)

// BenchmarkNewClose measures bringing a testbed up (namespaces, links,
// Go switch processes, the program pushed over P4Runtime) and tearing it
// down, for the ready topologies: the fixed cost of every netns run.
func BenchmarkNewClose(b *testing.B) {
	if testing.Short() {
		b.Skip("skipping in -short")
	}
	needRoot(b)
	for _, name := range []string{"star", "leafspine"} {
		top, err := topologies.Open(name)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			var up, down time.Duration
			for range b.N {
				start := time.Now()
				tb, err := New(context.Background(), testbed.Config{Topology: top}, Options{RunIDPrefix: prefix})
				if err != nil {
					b.Fatal(err)
				}
				mid := time.Now()
				if err := tb.Close(); err != nil {
					b.Fatal(err)
				}
				up += mid.Sub(start)
				down += time.Since(mid)
			}
			b.ReportMetric(float64(up.Milliseconds())/float64(b.N), "ms_up")
			b.ReportMetric(float64(down.Milliseconds())/float64(b.N), "ms_down")
			b.ReportMetric(float64(len(top.Nodes)), "nodes")
		})
	}
	if err := netns.CheckClean(prefix); err != nil {
		b.Fatal(err)
	}
}
