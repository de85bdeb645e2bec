//go:build linux && !nonetns

package netnstb

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/netns"
	"github.com/tracebed/tracebed/emulator/testbed"
	"github.com/tracebed/tracebed/internal/units"
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
				tb, err := New(context.Background(), testbed.Config{Topology: top, Program: &plane}, Options{RunIDPrefix: prefix})
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

// windowed keeps w datagrams in flight to an echo agent and counts the
// answers.
type windowed struct {
	to   emulator.Addr
	w    int
	buf  []byte
	env  emulator.Env
	got  int
	stop bool
}

func (p *windowed) Start(env emulator.Env) {
	p.env = env
	for range p.w {
		env.Send(p.to, p.buf)
	}
}

func (p *windowed) Recv(emulator.Addr, []byte) {
	p.got++
	if !p.stop {
		p.env.Send(p.to, p.buf)
	}
}

// BenchmarkEchoRate measures how many datagrams per second agents
// exchange through a netns testbed (h1 → Go switch → h2 and back, a
// window of 64 in flight, 10 Gbit/s links so that nothing but software
// limits): the per-datagram cost that bounds the scale factor
// (docs/scaling.md). One iteration runs for a second of wall time.
func BenchmarkEchoRate(b *testing.B) {
	if testing.Short() {
		b.Skip("skipping in -short")
	}
	needRoot(b)
	f, err := topologies.Generate(topologies.Params{Generate: "star", Hosts: 2, Rate: 10 * units.Gbps})
	if err != nil {
		b.Fatal(err)
	}
	top, err := f.Build("star")
	if err != nil {
		b.Fatal(err)
	}
	for _, size := range []int{256, 4120} {
		b.Run(fmt.Sprintf("payload=%d", size), func(b *testing.B) {
			tb, err := New(context.Background(), testbed.Config{Topology: top, Program: &plane}, Options{RunIDPrefix: prefix, NoShaping: true})
			if err != nil {
				b.Fatal(err)
			}
			defer tb.Close()
			srv, err := tb.Attach("h2", 7, &echo{})
			if err != nil {
				b.Fatal(err)
			}
			p := &windowed{to: srv.Local(), w: 64, buf: make([]byte, size)}
			cli, err := tb.Attach("h1", 7, p)
			if err != nil {
				b.Fatal(err)
			}
			time.Sleep(200 * time.Millisecond) // warm up
			var total int
			var elapsed time.Duration
			for range b.N {
				var before, after int
				tb.Inspect(cli, func() { before = p.got })
				start := time.Now()
				time.Sleep(time.Second)
				tb.Inspect(cli, func() { after = p.got })
				elapsed += time.Since(start)
				total += after - before
			}
			tb.Inspect(cli, func() { p.stop = true })
			pps := float64(total) / elapsed.Seconds()
			// Each answer is two datagrams through the switch.
			b.ReportMetric(pps, "answers/s")
			b.ReportMetric(2*pps*float64(size)*8/1e6, "Mbit/s")
		})
	}
}
