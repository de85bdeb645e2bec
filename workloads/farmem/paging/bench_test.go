package paging

import (
	"bytes"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/tracebed/tracebed/emulator/sim"
	"github.com/tracebed/tracebed/internal/cputime"
	"github.com/tracebed/tracebed/p4/farmem"
	"github.com/tracebed/tracebed/p4/fwd"
	"github.com/tracebed/tracebed/topologies"
	memtrace "github.com/tracebed/tracebed/traces/mem"
	"github.com/tracebed/tracebed/workloads/farmem/apps"
)

// encodedTrace returns a workload's trace in the binary format.
func encodedTrace(b *testing.B, name string, scale float64) ([]byte, int, int) {
	g, err := apps.New(name, apps.Params{Scale: scale, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	acc, err := memtrace.ReadAll(g)
	if err != nil {
		b.Fatal(err)
	}
	var buf bytes.Buffer
	if err := memtrace.WriteBinary(&buf, memtrace.Header{PageSize: 4096, Pages: uint64(g.Pages())}, acc); err != nil {
		b.Fatal(err)
	}
	return buf.Bytes(), len(acc), g.Pages()
}

// replay runs one host replaying a binary trace against one memory server
// on a star of 100 Gbps links, and returns the simulation's event count.
func replay(b *testing.B, data []byte, ws int, local float64) (uint64, *Stats) {
	f, _ := topologies.Generate(topologies.Params{Generate: "star", Hosts: 2, Delay: 1000})
	top, err := f.Build("star")
	if err != nil {
		b.Fatal(err)
	}
	s := sim.New()
	net, err := sim.NewNetwork(s, top, sim.Options{Seed: 1, Pipeline: fwd.SimPipeline})
	if err != nil {
		b.Fatal(err)
	}
	srv := NewServer(4096)
	net.Attach("h2", farmem.Port, srv)
	r, err := memtrace.NewReader("bench", bytes.NewReader(data))
	if err != nil {
		b.Fatal(err)
	}
	limit := int(local * float64(ws))
	h, err := NewHost(HostConfig{ID: 1, Limit: limit, Headroom: 8, Servers: []netip.AddrPort{netip.AddrPortFrom(top.Node("h2").IP, farmem.Port)},
		Engine: engine{bg: overLimit(8), direct: 8}}, r, ws)
	if err != nil {
		b.Fatal(err)
	}
	net.Attach("h1", farmem.HostPort, h)
	for !h.Done() {
		s.RunUntil(s.Now() + sim.Second)
	}
	return s.Fired(), h.Stats()
}

// BenchmarkReplay measures trace replay on the sim substrate, one core:
// a binary trace is decoded and replayed by a paging host, hits run ahead
// without events, misses go to a memory server over the simulated network.
// "local" is the local memory as a fraction of the working set; at 1.0
// every access after the first touches is a local hit. The target is 5
// million page accesses per second per core.
func BenchmarkReplay(b *testing.B) {
	for _, tc := range []struct {
		app   string
		local float64
	}{
		{"pagerank", 1.0}, {"memcached", 1.0}, {"memcached", 0.9}, {"pagerank", 0.75}, {"stream", 0.5},
	} {
		b.Run(fmt.Sprintf("%s-local%.0f%%", tc.app, 100*tc.local), func(b *testing.B) {
			data, n, ws := encodedTrace(b, tc.app, 64)
			var events, faults, ops uint64
			b.ResetTimer()
			start, cpu0 := time.Now(), cputime.Process()
			for range b.N {
				ev, st := replay(b, data, ws, tc.local)
				events += ev
				faults += st.Faults
				ops += st.Ops
			}
			el, cpu := time.Since(start).Seconds(), cputime.Since(cpu0).Seconds()
			if ops != uint64(b.N*n) {
				b.Fatalf("replayed %d of %d accesses", ops, b.N*n)
			}
			b.ReportMetric(float64(ops)/el, "accesses/s")
			b.ReportMetric(float64(ops)/cpu, "accesses/cpu-s")
			b.ReportMetric(float64(events)/float64(ops), "events/access")
			b.ReportMetric(float64(faults)/float64(ops), "faults/access")
		})
	}
}
