package cm_test

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/tracebed/tracebed/emulator/roce"
	"github.com/tracebed/tracebed/emulator/roce/cm"
)

// FuzzManagerRecv hands both ends of an established connection an
// arbitrary datagram from their peer's address (with, when asked, the
// connection's real communication ids written in, so that mutations reach
// its state machine), then makes a second connection: nothing panics, and
// every Connect's callback runs exactly once, with a connection or an
// error.
func FuzzManagerRecv(f *testing.F) {
	for _, m := range []cm.Msg{
		{Type: cm.TypeREQ, Service: 9, QPN: 5, PSN: 1, MTU: 1024},
		{Type: cm.TypeREP, Service: 9, QPN: 5, PSN: 1, MTU: 1024, Region: cm.Region{Addr: 1, RKey: 2, Length: 3}},
		{Type: cm.TypeRTU, Service: 9},
		{Type: cm.TypeREJ, Service: 9, Reason: cm.RejectConsumer},
		{Type: cm.TypeDREQ, Service: 9},
		{Type: cm.TypeDREP, Service: 9},
	} {
		f.Add(m.Append(nil), true, true)
		f.Add(m.Append(nil), true, false)
	}
	f.Add([]byte("RCM"), false, false)
	f.Fuzz(func(t *testing.T, b []byte, ids, toServer bool) {
		tb, hosts := star(t, 0)
		done := map[int]int{}
		var conns []*cm.Conn
		connect := func(s *side, n int) {
			err := s.m.Connect(hosts[1].IP, 9, cm.Params{QP: roce.QPConfig{SendCQ: s.cq, RecvCQ: s.cq}}, func(c *cm.Conn, err error) {
				done[n]++
				if err == nil {
					conns = append(conns, c)
				}
			})
			if err != nil {
				done[n]++ // refused at once: no callback comes
			}
		}
		srv := attach(t, tb, hosts[1].Name, func(s *side) {
			if err := s.m.Listen(9, cm.Params{QP: roce.QPConfig{SendCQ: s.cq, RecvCQ: s.cq}}, func(*cm.Conn) {}); err != nil {
				t.Error(err)
			}
		})
		cli := attach(t, tb, hosts[0].Name, func(s *side) { connect(s, 0) })
		run(t, tb, func() bool { return done[0] > 0 })
		if len(conns) != 1 {
			t.Fatalf("the first connection failed on a lossless star")
		}
		msg := append([]byte(nil), b...)
		local, remote := cm.IDs(conns[0])
		m, from := cli.m, hosts[1].IP
		if toServer {
			local, remote = remote, local
			m, from = srv.m, hosts[0].IP
		}
		if ids && len(msg) >= 16 {
			// As the peer writes them: its id first, ours second.
			binary.BigEndian.PutUint32(msg[8:], remote)
			binary.BigEndian.PutUint32(msg[12:], local)
		}
		cm.Inject(m, from, msg)
		connect(cli, 1)
		// Every callback runs, whatever the datagram did: the retries of
		// the connection manager end within a few milliseconds.
		err := tb.Run(context.Background(), 10*time.Microsecond, time.Second, func() bool { return done[1] > 0 })
		if done[0] != 1 || done[1] != 1 {
			t.Fatalf("callbacks ran %d and %d times (%v)", done[0], done[1], err)
		}
	})
}
