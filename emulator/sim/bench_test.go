package sim

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

// BenchmarkEventCore measures the event heap alone: each event schedules its
// successor, with 1000 events pending.
func BenchmarkEventCore(b *testing.B) {
	s := New()
	var tick func()
	n := 0
	tick = func() {
		n++
		if n < b.N {
			s.At(s.Now()+Time(1000+n%997), tick)
		}
	}
	for i := range 1000 {
		s.At(Time(i), tick)
	}
	b.ResetTimer()
	s.Run()
	b.ReportMetric(float64(s.Fired())/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkLinkHop streams frames through a chain of eight switches running
// the forwarding pipeline: every event is a link hop (serialization done or
// arrival) with its pipeline work. This is the event rate the issue targets.
func BenchmarkLinkHop(b *testing.B) {
	var y strings.Builder
	y.WriteString("name: line\ntopology:\n  defaults: {link: {rate: 100Gbps, delay: 1us, buffer: 64MiB}}\n  nodes:\n    h1: {kind: host}\n    h2: {kind: host}\n")
	const hops = 8
	for i := 1; i <= hops; i++ {
		fmt.Fprintf(&y, "    s%d: {kind: switch}\n", i)
	}
	y.WriteString("  links:\n    - {endpoints: [h1, s1]}\n")
	for i := 1; i < hops; i++ {
		fmt.Fprintf(&y, "    - {endpoints: [s%d, s%d]}\n", i, i+1)
	}
	fmt.Fprintf(&y, "    - {endpoints: [s%d, h2]}\n", hops)
	top := mustTopo(b, y.String())
	s, n := mustNet(b, top, Options{})
	rx := &sink{}
	n.Attach("h2", 1, rx)
	// Each frame costs two events per link: serialization done, arrival.
	frames := max(1, b.N/(2*(hops+1)))
	n.Attach("h1", 1, burst{to: netip.AddrPortFrom(top.Node("h2").IP, 1), n: frames, size: 64})
	s.RunUntil(0) // run the agents' Start, which queues every frame
	b.ResetTimer()
	s.Run()
	b.StopTimer()
	if len(rx.times) != frames {
		b.Fatalf("delivered %d of %d", len(rx.times), frames)
	}
	b.ReportMetric(float64(s.Fired())/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(frames*(hops+1))/b.Elapsed().Seconds(), "hops/s")
}
