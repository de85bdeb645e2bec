package roce_test

import (
	"context"
	"testing"
	"time"

	"github.com/tracebed/tracebed/emulator/internal/testplane"
	"github.com/tracebed/tracebed/emulator/roce"
	"github.com/tracebed/tracebed/emulator/roce/cm"
	"github.com/tracebed/tracebed/emulator/testbed"
	"github.com/tracebed/tracebed/internal/cputime"
	"github.com/tracebed/tracebed/internal/units"
)

// BenchmarkRCFlow runs one RC flow between two hosts of a star on sim at
// 100 Gbps with a 4096-byte MTU: a stream of 4 MiB RDMA WRITEs, two
// outstanding at a time (each completion posts the next). It reports the data packets the
// simulation moves per CPU-second of the process (all of its threads:
// the target is 1 M), the simulation events each packet costs, the
// simulated goodput, and allocations per packet.
func BenchmarkRCFlow(b *testing.B) {
	const msg = 4 << 20
	top := pair(b, impairment{name: "clean"}, 100*units.Gbps, time.Microsecond)
	prog := testplane.Program()
	tb, err := testbed.NewSim(testbed.Config{Topology: top, Program: &prog, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	hosts := top.Hosts()
	newDev := func() (*roce.Device, *cm.Manager) {
		d, err := roce.NewDevice(roce.Config{MTU: 4096})
		if err != nil {
			b.Fatal(err)
		}
		return d, cm.New(d, cm.Config{})
	}
	da, ma := newDev()
	db, mb := newDev()
	src, _ := da.RegMR(make([]byte, msg), 0)
	dst, _ := db.RegMR(make([]byte, msg), roce.AccessLocalWrite|roce.AccessRemoteWrite)
	var conn *cm.Conn
	completed, posted, want := 0, 0, 0
	var doneAt time.Duration
	var post func()
	if err := mb.Listen(1, cm.Params{Region: cm.Region{Addr: dst.Addr, RKey: dst.RKey, Length: msg}}, nil); err != nil {
		b.Fatal(err)
	}
	if _, err := cm.Attach(tb, hosts[1].Name, db, mb); err != nil {
		b.Fatal(err)
	}
	if _, err := cm.Attach(tb, hosts[0].Name, da, ma); err != nil {
		b.Fatal(err)
	}
	cq := da.CreateCQ(func(c roce.Completion) {
		if c.Status != roce.StatusSuccess {
			b.Fatalf("completion %v", c)
		}
		completed++
		doneAt = tb.Now()
		if posted < want {
			post()
		}
	})
	tb.Sim.At(tb.Sim.Now(), func() {
		ma.Connect(hosts[1].IP, 1, cm.Params{QP: roce.QPConfig{SendCQ: cq, RecvCQ: cq}}, func(c *cm.Conn, err error) {
			if err != nil {
				b.Fatal(err)
			}
			conn = c
		})
	})
	ctx := context.Background()
	if err := tb.Run(ctx, time.Microsecond, time.Second, func() bool { return conn != nil }); err != nil {
		b.Fatal(err)
	}
	post = func() {
		posted++
		err := conn.QP.PostSend(roce.SendWR{ID: 1, Op: roce.OpWrite, Local: src.SGE(0, msg), Remote: conn.Remote.Addr, RKey: conn.Remote.RKey, Signaled: true})
		if err != nil {
			b.Fatal(err)
		}
	}
	// One transfer to warm up, then the measured ones.
	want = 1
	post()
	if err := tb.Run(ctx, 10*time.Microsecond, time.Second, func() bool { return completed == 1 }); err != nil {
		b.Fatal(err)
	}
	pkts0, simt0, events0 := da.Counters().TxPackets, doneAt, tb.Sim.Fired()
	b.ReportAllocs()
	b.SetBytes(msg)
	cpu0 := cputime.Process()
	b.ResetTimer()
	want = 1 + b.N
	post()
	if b.N > 1 {
		post()
	}
	if err := tb.Run(ctx, time.Millisecond, time.Hour, func() bool { return completed == want }); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	cpu := cputime.Process() - cpu0
	pkts := da.Counters().TxPackets - pkts0
	b.ReportMetric(float64(pkts)/cpu.Seconds(), "pkts/cpu-s")
	// Simulation events per data packet: the share of the work that is
	// the event core's (compare BenchmarkLinkHop's events/s on the same
	// machine).
	b.ReportMetric(float64(tb.Sim.Fired()-events0)/float64(pkts), "events/pkt")
	b.ReportMetric(float64(b.N)*msg*8/(doneAt-simt0).Seconds()/1e9, "sim-Gbps")
	if c := da.Counters(); c.Retransmitted != 0 || c.Timeouts != 0 {
		b.Fatalf("a clean link retransmitted: %v", c)
	}
}
