package testbed

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/internal/testplane"
	"github.com/tracebed/tracebed/topologies"
)

// TestHostLatency checks the simulated hosts' receive latency: every
// datagram arrives, in the order sent, later by about the median.
func TestHostLatency(t *testing.T) {
	f, err := topologies.Generate(topologies.Params{Generate: "star", Hosts: 2})
	if err != nil {
		t.Fatal(err)
	}
	top, err := f.Build("t")
	if err != nil {
		t.Fatal(err)
	}
	prog := testplane.Program()
	raw, err := NewSim(Config{Topology: top, Program: &prog, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	h := HostLatency{Median: 40 * time.Microsecond, Sigma: 1.4}
	tb := WithHostLatency(raw, h, 1)
	const n = 4000
	var sent []time.Duration
	var got []int
	var delays []float64
	var rx emulator.Env
	if _, err := tb.Attach("h2", 9, emulator.AgentFunc{
		OnStart: func(env emulator.Env) { rx = env },
		OnRecv: func(_ emulator.Addr, b []byte) {
			i := int(b[0])<<8 | int(b[1])
			got = append(got, i)
			delays = append(delays, float64(rx.Now()-sent[i]))
		},
	}); err != nil {
		t.Fatal(err)
	}
	to := netip.AddrPortFrom(top.Node("h2").IP, 9)
	var tx emulator.Env
	var send func()
	send = func() {
		i := len(sent)
		sent = append(sent, tx.Now())
		tx.Send(to, []byte{byte(i >> 8), byte(i)})
		if len(sent) < n {
			tx.After(500*time.Microsecond, send) // well above the mean latency: no backlog
		}
	}
	if _, err := tb.Attach("h1", 9, emulator.AgentFunc{OnStart: func(env emulator.Env) { tx = env; send() }}); err != nil {
		t.Fatal(err)
	}
	if err := tb.Run(context.Background(), time.Millisecond, time.Minute, func() bool { return len(got) == n }); err != nil {
		t.Fatal(err)
	}
	if !slices.IsSorted(got) {
		t.Error("datagrams reordered by the receive latency model")
	}
	slices.Sort(delays)
	med := time.Duration(delays[n/2])
	// The path itself takes a few µs at 100 Gbps; queueing behind a slow
	// datagram only adds.
	if med < h.Median || med > 2*h.Median {
		t.Errorf("median one-way delay %v with a %v median receive latency", med, h.Median)
	}
	if WithHostLatency(raw, HostLatency{}, 1) != raw {
		t.Error("a zero latency model wraps the testbed")
	}
}
