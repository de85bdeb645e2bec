//go:build linux && !nonetns

package wireshark

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tracebed/tracebed/emulator/netns"
	"github.com/tracebed/tracebed/emulator/netns/lab"
	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/p4/farmem"
	"github.com/tracebed/tracebed/p4/ina"
	"github.com/tracebed/tracebed/p4/programs"
	"github.com/tracebed/tracebed/topologies"
)

// TestDissectorOnCapture sends the messages from h1 to h2 through a Go
// switch and decodes what 'topo capture' (lab.Run.Capture) recorded on
// the switch's port to h1.
func TestDissectorOnCapture(t *testing.T) {
	needTshark(t)
	if os.Geteuid() != 0 {
		t.Skip("skipping: capturing needs root (network namespaces)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f, err := topologies.Generate(topologies.Params{Generate: "star", Hosts: 2, Rate: units.Gbps})
	if err != nil {
		t.Fatal(err)
	}
	top, err := f.Build("star2")
	if err != nil {
		t.Fatal(err)
	}
	reg, err := programs.Registry()
	if err != nil {
		t.Fatal(err)
	}
	id := netns.TestRunID(testPrefix)
	defer lab.Remove(id)
	r, err := lab.Up(ctx, top, nil, lab.Options{Net: netns.Options{RunID: id, MTU: 9000}, Programs: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Down()
	file := filepath.Join(t.TempDir(), "tor-1.pcapng")
	out, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	msgs := messages()
	// Receivers on h2, so that it answers no message with an ICMP error.
	for _, port := range []int{ina.Port, 40003, farmem.Port, farmem.HostPort} {
		err := r.Net.Do("h2", func() error {
			c, err := net.ListenUDP("udp4", &net.UDPAddr{Port: port})
			if err == nil {
				t.Cleanup(func() { c.Close() })
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	capCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := r.Capture(capCtx, "tor:1", out, netns.CaptureOptions{Count: len(msgs)})
		done <- err
	}()
	time.Sleep(200 * time.Millisecond) // the capture socket is bound
	h2 := top.Node("h2").IP
	for _, m := range msgs {
		var conn *net.UDPConn
		err := r.Net.Do("h1", func() error {
			var err error
			conn, err = net.ListenUDP("udp4", &net.UDPAddr{Port: int(m.srcPort)})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.WriteToUDPAddrPort(m.payload, netip.AddrPortFrom(h2, m.dstPort)); err != nil {
			t.Fatal(err)
		}
		conn.Close()
		time.Sleep(10 * time.Millisecond) // keep the order on the wire
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		stop()
		<-done
		t.Fatal("the capture did not see every message")
	}
	stop()
	out.Close()
	check(t, tshark(t, file), msgs)
}
