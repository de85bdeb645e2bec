package paging

import (
	"bytes"
	"fmt"
	"math"
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
// (its page memory from pool, nil to allocate it) on a star of 100 Gbps
// links, and returns the simulation's event count.
func replay(b *testing.B, data []byte, ws int, local float64, pool *PagePool) (uint64, *Stats) {
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
	srv := NewPooledServer(4096, pool)
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
	srv.Release()
	return s.Fired(), h.Stats()
}

// BenchmarkReplay measures trace replay on the sim substrate, one core:
// a binary trace is decoded and replayed by a paging host, hits run ahead
// without events, misses go to a memory server over the simulated network.
// "local" is the local memory as a fraction of the working set; at 1.0
// every access after the first touches is a local hit. The target is 5
// million page accesses per CPU-second at 5% faults: memcached-faults5%
// gives memcached 5,433 of its 8,192 pages, where 10,239 of its 204,800
// accesses fault (4.9995%).
//
// Each replay has a new memory server, whose store grows to every page the
// host writes back (32 MiB at memcached-faults5%). Its memory is new to the
// store, zeroed by the Go heap or, when the heap gave it back to the
// system between replays, faulted in page by page: on a virtual machine
// with shadow paging a fault costs 13–18 µs of CPU, and a fresh store a
// third of the replay. The -pooled case hands the server's memory on from
// replay to replay (PagePool), as the runs of an experiment do, and
// measures the replay itself; minor-faults/op says how much memory was new.
func BenchmarkReplay(b *testing.B) {
	for _, tc := range []struct {
		name   string
		app    string
		local  float64
		faults float64 // if set, the fault rate the case is meant to have
		pooled bool    // the server's page memory goes from replay to replay
	}{
		{app: "pagerank", local: 1.0}, {app: "memcached", local: 1.0}, {app: "memcached", local: 0.9},
		{app: "pagerank", local: 0.75}, {app: "stream", local: 0.5},
		{name: "memcached-faults5%", app: "memcached", local: 5433.5 / 8192, faults: 0.05},
		{name: "memcached-faults5%-pooled", app: "memcached", local: 5433.5 / 8192, faults: 0.05, pooled: true},
	} {
		name := tc.name
		if name == "" {
			name = fmt.Sprintf("%s-local%.0f%%", tc.app, 100*tc.local)
		}
		b.Run(name, func(b *testing.B) {
			data, n, ws := encodedTrace(b, tc.app, 64)
			var pool *PagePool
			if tc.pooled {
				pool = &PagePool{}
				replay(b, data, ws, tc.local, pool) // the pool's memory, once
			}
			var events, faults, ops uint64
			b.ResetTimer()
			start, cpu0, mf0 := time.Now(), cputime.Process(), cputime.MinorFaults()
			for range b.N {
				ev, st := replay(b, data, ws, tc.local, pool)
				events += ev
				faults += st.Faults
				ops += st.Ops
			}
			el, cpu, mf := time.Since(start).Seconds(), cputime.Since(cpu0).Seconds(), cputime.MinorFaults()-mf0
			if ops != uint64(b.N*n) {
				b.Fatalf("replayed %d of %d accesses", ops, b.N*n)
			}
			if rate := float64(faults) / float64(ops); tc.faults > 0 && math.Abs(rate-tc.faults) > 0.0005 {
				b.Fatalf("fault rate %.4f, want %.4f: the trace or the host changed, pick the local memory again", rate, tc.faults)
			}
			b.ReportMetric(float64(ops)/el, "accesses/s")
			b.ReportMetric(float64(ops)/cpu, "accesses/cpu-s")
			b.ReportMetric(float64(events)/float64(ops), "events/access")
			b.ReportMetric(float64(faults)/float64(ops), "faults/access")
			if mf >= 0 {
				b.ReportMetric(float64(mf)/float64(b.N), "minor-faults/op")
			}
		})
	}
}
