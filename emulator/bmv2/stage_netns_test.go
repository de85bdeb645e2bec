//go:build linux && !nonetns

package bmv2

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/tracebed/tracebed/emulator/netns"
	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/topologies"
)

// prefix starts the run ids of this test binary (see netns.RunTests); "q"
// is no hex digit, so no random run id starts with it.
var prefix = "bq" + netns.NewRunID()[:1]

func TestMain(m *testing.M) { os.Exit(netns.RunTests(m, prefix)) }

// stagedStar brings up a star of two hosts whose links have the given
// delay and loss, with link stages on the switch and, standing in for
// bmv2, a Linux bridge over the stages' switch-side interfaces.
func stagedStar(t *testing.T, delay time.Duration, loss float64) (*netns.Network, *Stages) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: network namespaces need root (CI runs as root)")
	}
	f, err := topologies.Generate(topologies.Params{Generate: "star", Hosts: 2, Rate: 100 * units.Mbps, Delay: units.Duration(delay)})
	if err != nil {
		t.Fatal(err)
	}
	top, err := f.Build("star")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range top.Links {
		l.Loss = loss
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := netns.Up(ctx, top, netns.Options{RunID: netns.TestRunID(prefix), L2Hosts: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Down(); err != nil {
			t.Error(err)
		}
	})
	st, err := StartStages(n, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.Stop(); err != nil {
			t.Error(err)
		}
	})
	h, err := n.Handle("tor")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Delete()
	off := false
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}, MulticastSnooping: &off}
	if err := h.LinkAdd(br); err != nil {
		t.Fatal(err)
	}
	for _, p := range top.Node("tor").Ports {
		l, err := h.LinkByName(StageIface(p.Num))
		if err != nil {
			t.Fatal(err)
		}
		if err := h.LinkSetMaster(l, br); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.LinkSetUp(br); err != nil {
		t.Fatal(err)
	}
	return n, st
}

// TestStagesDelay: a ping between two hosts crosses two links each way,
// each delayed by its stage: the round trip takes four link delays.
func TestStagesDelay(t *testing.T) {
	const delay = 5 * time.Millisecond
	n, _ := stagedStar(t, delay, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	best := time.Hour
	for i := range 10 {
		rtt, err := n.Ping(ctx, "h1", n.Topology.Node("h2").IP, i)
		if err != nil {
			t.Fatal(err)
		}
		best = min(best, rtt)
	}
	t.Logf("best round trip of 10 pings: %v (links of %v)", best, delay)
	if best < 4*delay || best > 4*delay+5*time.Millisecond {
		t.Errorf("best round trip %v over links of %v, want about %v", best, delay, 4*delay)
	}
}

// TestStagesLoss: datagrams from one host to another cross two links,
// each losing 20% in its stage: about 64% arrive, and the stages count
// the losses.
func TestStagesLoss(t *testing.T) {
	const loss, sent = 0.2, 2000
	n, st := stagedStar(t, 0, loss)
	dst := n.Topology.Node("h2")
	var rx, tx net.PacketConn
	if err := n.Do("h2", func() (err error) { rx, err = net.ListenPacket("udp4", dst.IP.String()+":9000"); return }); err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	if err := n.Do("h1", func() (err error) { tx, err = net.ListenPacket("udp4", ":0"); return }); err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	got := make(chan int)
	go func() {
		buf := make([]byte, 2048)
		k := 0
		for {
			rx.SetReadDeadline(time.Now().Add(time.Second))
			if _, _, err := rx.ReadFrom(buf); err != nil {
				got <- k
				return
			}
			k++
		}
	}()
	to := &net.UDPAddr{IP: net.IP(dst.IP.AsSlice()), Port: 9000}
	for range sent {
		if _, err := tx.WriteTo(make([]byte, 200), to); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Microsecond) // 8 Mbit/s: no queue drops at 100 Mbit/s
	}
	k := <-got
	frac := float64(k) / sent
	want := (1 - loss) * (1 - loss)
	t.Logf("%d of %d datagrams arrived (%.3f; want about %.3f)", k, sent, frac, want)
	if frac < want-0.06 || frac > want+0.06 {
		t.Errorf("%d of %d datagrams arrived (%.3f) over two links losing %.0f%% each; want about %.3f", k, sent, frac, 100*loss, want)
	}
	stats, err := st.Stats(context.Background(), "tor")
	if err != nil {
		t.Fatal(err)
	}
	lost := stats[1].Lost + stats[2].Lost
	if lost == 0 || int(lost)+k > sent || int(lost)+k < sent-20 {
		t.Errorf("stages counted %d lost, %d arrived of %d sent (%+v)", lost, k, sent, stats)
	}
}
