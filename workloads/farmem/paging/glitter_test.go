package paging_test

// Glitter's host mechanism (systems/glitter) driving a paging host on the
// simulation, against Fastswap.

import (
	"net/netip"
	"testing"
	"time"

	"github.com/tracebed/tracebed/emulator/sim"
	"github.com/tracebed/tracebed/p4/farmem"
	"github.com/tracebed/tracebed/p4/fwd"
	"github.com/tracebed/tracebed/systems/evict"
	"github.com/tracebed/tracebed/systems/fastswap"
	"github.com/tracebed/tracebed/systems/glitter"
	"github.com/tracebed/tracebed/topologies"
	memtrace "github.com/tracebed/tracebed/traces/mem"
	"github.com/tracebed/tracebed/workloads/farmem/paging"
)

// burstyTrace allocates memory in bursts: a hot page, then rounds of 24
// fresh pages written 200ns apart, each followed by 500µs of compute.
func burstyTrace(rounds int) []memtrace.Access {
	acc := []memtrace.Access{{Page: 0, Write: true}}
	next := uint64(1)
	for range rounds {
		for range 24 {
			acc = append(acc, memtrace.Access{Page: next, Gap: 200 * time.Nanosecond, Write: true})
			next++
		}
		acc = append(acc, memtrace.Access{Page: 0, Gap: 500 * time.Microsecond})
	}
	return acc
}

func runHost(t *testing.T, engine evict.Engine, acc []memtrace.Access, limit, headroom int) *paging.Stats {
	t.Helper()
	f, err := topologies.Generate(topologies.Params{Generate: "star", Hosts: 2})
	if err != nil {
		t.Fatal(err)
	}
	top, err := f.Build("star")
	if err != nil {
		t.Fatal(err)
	}
	s := sim.New()
	net, err := sim.NewNetwork(s, top, sim.Options{Seed: 1, Pipeline: fwd.SimPipeline})
	if err != nil {
		t.Fatal(err)
	}
	srv := paging.NewServer(4096)
	if _, err := net.Attach("h2", farmem.Port, srv); err != nil {
		t.Fatal(err)
	}
	server := netip.AddrPortFrom(top.Node("h2").IP, farmem.Port)
	h, err := paging.NewHost(paging.HostConfig{ID: 1, Limit: limit, Headroom: headroom, Servers: []netip.AddrPort{server},
		Engine: engine, ReclaimOverhead: time.Microsecond}, memtrace.NewSliceSource(acc), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := net.Attach("h1", farmem.HostPort, h); err != nil {
		t.Fatal(err)
	}
	for !h.Done() {
		if s.Pending() == 0 {
			t.Fatal("stalled")
		}
		s.RunUntil(s.Now() + sim.Millisecond)
	}
	paging.CheckServers(h, func(_, host netip.AddrPort, page uint64) (uint32, uint32, []byte, bool) {
		return srv.Lookup(host, page)
	})
	return h.Stats()
}

// TestAdaptiveThresholdAbsorbsBursts shows the host mechanism at work: with
// bursts of 24 allocations, Fastswap's fixed headroom of 8 free frames runs
// out in every burst and the application blocks; Glitter sizes its reserve
// from the bursts it measured and rebuilds it between them, so after the
// first bursts it does not block.
func TestAdaptiveThresholdAbsorbsBursts(t *testing.T) {
	const rounds, scale = 40, 256
	acc := burstyTrace(rounds)
	limit, headroom := 100, fastswap.Scaled(fastswap.MaxReclaimOffload, scale)
	fs := runHost(t, fastswap.New(fastswap.Params{}, scale), acc, limit, headroom)
	gl := runHost(t, glitter.NewEngine(glitter.Params{}, scale), acc, limit, headroom)
	for name, st := range map[string]*paging.Stats{"fastswap": fs, "glitter": gl} {
		if st.Integrity != 0 {
			t.Errorf("%s: integrity errors %v", name, st.IntegrityDetail)
		}
		var blocked time.Duration
		for _, b := range st.Blocks {
			blocked += b.Duration
		}
		t.Logf("%s: %d blocks (%v blocked), %d evictions, completion %v", name, len(st.Blocks), blocked, st.Evictions, st.Completion)
	}
	if len(fs.Blocks) < rounds-5 {
		t.Errorf("fastswap blocked %d times in %d bursts; the test expects about one block per burst", len(fs.Blocks), rounds)
	}
	if len(gl.Blocks) > len(fs.Blocks)/4 {
		t.Errorf("glitter blocked %d times, fastswap %d: the adaptive reserve should absorb the bursts", len(gl.Blocks), len(fs.Blocks))
	}
	if gl.Completion >= fs.Completion {
		t.Errorf("glitter took %v, fastswap %v", gl.Completion, fs.Completion)
	}
}
