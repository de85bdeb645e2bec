package cm_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tracebed/tracebed/emulator/internal/testplane"
	"github.com/tracebed/tracebed/emulator/roce"
	"github.com/tracebed/tracebed/emulator/roce/cm"
	"github.com/tracebed/tracebed/emulator/testbed"
	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/topologies"
)

// star returns a simulated star of three hosts whose links lose loss of
// the frames.
func star(t *testing.T, loss float64) (*testbed.Sim, []*topologies.Node) {
	t.Helper()
	f, err := topologies.Generate(topologies.Params{Generate: "star", Name: "cm", Hosts: 3, Rate: 10 * units.Gbps, Delay: units.Duration(time.Microsecond)})
	if err != nil {
		t.Fatal(err)
	}
	top, err := f.Build("cm")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range top.Links {
		l.Loss = loss
	}
	prog := testplane.Program()
	tb, err := testbed.NewSim(testbed.Config{Topology: top, Program: &prog, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	return tb, top.Hosts()
}

type side struct {
	dev *roce.Device
	m   *cm.Manager
	cq  *roce.CQ
	wcs []roce.Completion
}

func attach(t *testing.T, tb *testbed.Sim, host string, onStart func(*side)) *side {
	t.Helper()
	s := &side{}
	var err error
	s.dev, err = roce.NewDevice(roce.Config{OnStart: func(*roce.Device) {
		if onStart != nil {
			onStart(s)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	s.m = cm.New(s.dev, cm.Config{Timeout: 100 * time.Microsecond, Retries: 5})
	s.cq = s.dev.CreateCQ(func(c roce.Completion) { s.wcs = append(s.wcs, c) })
	if _, err := cm.Attach(tb, host, s.dev, s.m); err != nil {
		t.Fatal(err)
	}
	return s
}

func run(t *testing.T, tb *testbed.Sim, done func() bool) {
	t.Helper()
	if err := tb.Run(context.Background(), 10*time.Microsecond, time.Second, done); err != nil {
		t.Fatal(err)
	}
}

// TestConnectExchange connects under 20% loss (the manager sends again)
// and checks what each side learns of the other: QP numbers, PSNs, the
// advertised region and private data; a SEND then works both ways.
func TestConnectExchange(t *testing.T) {
	tb, hosts := star(t, 0.2)
	var server, client *cm.Conn
	heard := false
	b := attach(t, tb, hosts[1].Name, func(s *side) {
		err := s.m.Listen(9, cm.Params{QP: roce.QPConfig{SendCQ: s.cq, RecvCQ: s.cq}, Region: cm.Region{Addr: 0x1000, RKey: 0x77, Length: 4096},
			Private: []byte("server"), MTU: 1024, OnDisconnect: func(*cm.Conn) { heard = true }, OnReady: func(c *cm.Conn) {
				mr, _ := s.dev.RegMR(make([]byte, 64), roce.AccessLocalWrite)
				c.QP.PostRecv(roce.RecvWR{ID: 1, Local: mr.SGE(0, 64)})
			}}, func(c *cm.Conn) { server = c })
		if err != nil {
			t.Error(err)
		}
	})
	a := attach(t, tb, hosts[0].Name, func(s *side) {
		err := s.m.Connect(hosts[1].IP, 9, cm.Params{QP: roce.QPConfig{SendCQ: s.cq, RecvCQ: s.cq}, Private: []byte("client"), FixPSN: true, PSN: 0xfffff0},
			func(c *cm.Conn, err error) {
				if err != nil {
					t.Error(err)
					return
				}
				client = c
				mr, _ := s.dev.RegMR([]byte("hello"), 0)
				c.QP.PostSend(roce.SendWR{ID: 5, Op: roce.OpSend, Local: mr.SGE(0, 5), Signaled: true})
			})
		if err != nil {
			t.Error(err)
		}
	})
	run(t, tb, func() bool { return server != nil && len(b.wcs) > 0 && len(a.wcs) > 0 })
	if string(server.Private) != "client" || string(client.Private) != "server" || client.Remote != (cm.Region{Addr: 0x1000, RKey: 0x77, Length: 4096}) {
		t.Errorf("exchange: server saw %q, client saw %q and %+v", server.Private, client.Private, client.Remote)
	}
	ca, sa := client.QP.Attr(), server.QP.Attr()
	if ca.DestQPN != server.QP.QPN() || sa.DestQPN != client.QP.QPN() || sa.RQPSN != 0xfffff0 || ca.RQPSN != sa.SQPSN {
		t.Errorf("QP attributes: client %+v, server %+v", ca, sa)
	}
	if ca.PathMTU != 1024 || sa.PathMTU != 1024 {
		t.Errorf("path MTU %d/%d, want the smaller side's 1024", ca.PathMTU, sa.PathMTU)
	}
	if b.wcs[0].Status != roce.StatusSuccess || b.wcs[0].ByteLen != 5 || a.wcs[0].WRID != 5 {
		t.Errorf("completions: a %v, b %v", a.wcs, b.wcs)
	}
	// Disconnect: both QPs go to ERR; the server hears of it.
	client.Disconnect()
	run(t, tb, func() bool { return heard })
	if client.QP.State() != roce.StateErr || server.QP.State() != roce.StateErr {
		t.Errorf("QPs %v and %v after Disconnect", client.QP.State(), server.QP.State())
	}
}

// TestRejectAndTimeout: a service nobody listens to is rejected; a host
// with no manager never answers, and the connection times out.
func TestRejectAndTimeout(t *testing.T) {
	tb, hosts := star(t, 0)
	attach(t, tb, hosts[1].Name, nil)
	var errs []error
	attach(t, tb, hosts[0].Name, func(s *side) {
		for _, peer := range []int{1, 2} {
			s.m.Connect(hosts[peer].IP, 42, cm.Params{QP: roce.QPConfig{SendCQ: s.cq, RecvCQ: s.cq}}, func(c *cm.Conn, err error) {
				errs = append(errs, err)
			})
		}
	})
	run(t, tb, func() bool { return len(errs) == 2 })
	if !errors.Is(errs[0], cm.ErrRejected) || !errors.Is(errs[1], cm.ErrTimeout) {
		t.Errorf("errors %v, want rejected then timed out", errs)
	}
}

// TestReconnect: a connection whose requester gave up (the responder's
// QP stopped answering: retry count exceeded, the QP in ERR) is
// re-established on the same QPs, as host software recovers one: both
// QPs keep their numbers, start from fresh PSNs, the passive side's
// OnReady and onConn run again, and a SEND goes through afterwards. The
// links lose 10% of the frames, so the manager's messages are repeated
// and their duplicates must not start another epoch.
func TestReconnect(t *testing.T) {
	tb, hosts := star(t, 0.1)
	var server, client *cm.Conn
	readies, conns := 0, 0
	var recvMR *roce.MR
	b := attach(t, tb, hosts[1].Name, func(s *side) {
		recvMR, _ = s.dev.RegMR(make([]byte, 64), roce.AccessLocalWrite)
		err := s.m.Listen(9, cm.Params{QP: roce.QPConfig{SendCQ: s.cq, RecvCQ: s.cq}, OnReady: func(c *cm.Conn) {
			readies++
			c.QP.PostRecv(roce.RecvWR{ID: uint64(readies), Local: recvMR.SGE(0, 64)})
		}}, func(c *cm.Conn) {
			conns++
			server = c
		})
		if err != nil {
			t.Error(err)
		}
	})
	var sendMR *roce.MR
	a := attach(t, tb, hosts[0].Name, func(s *side) {
		sendMR, _ = s.dev.RegMR([]byte("hello"), 0)
		err := s.m.Connect(hosts[1].IP, 9, cm.Params{QP: roce.QPConfig{SendCQ: s.cq, RecvCQ: s.cq}, Timeout: 8, RetryCnt: 3},
			func(c *cm.Conn, err error) {
				if err != nil {
					t.Error(err)
					return
				}
				client = c
			})
		if err != nil {
			t.Error(err)
		}
	})
	run(t, tb, func() bool { return client != nil && server != nil })
	qpA, qpB := client.QP.QPN(), server.QP.QPN()
	oldA, oldB := client.QP.Attr(), server.QP.Attr()

	// The responder stops answering: the SEND's retries run out.
	if err := server.QP.Modify(roce.QPAttr{State: roce.StateErr}, roce.AttrState); err != nil {
		t.Fatal(err)
	}
	b.wcs = nil
	client.QP.PostSend(roce.SendWR{ID: 1, Op: roce.OpSend, Local: sendMR.SGE(0, 5), Signaled: true})
	run(t, tb, func() bool { return len(a.wcs) > 0 })
	if a.wcs[0].Status != roce.StatusRetryExcErr || client.QP.State() != roce.StateErr {
		t.Fatalf("completion %v, QP %v; want retry_exceeded and ERR", a.wcs[0], client.QP.State())
	}

	// Re-established: fresh PSNs, the same QPs, and it carries data.
	again := false
	if err := client.Reconnect(func(c *cm.Conn, err error) {
		if err != nil {
			t.Error(err)
		}
		again = true
		c.QP.PostSend(roce.SendWR{ID: 2, Op: roce.OpSend, Local: sendMR.SGE(0, 5), Signaled: true})
	}); err != nil {
		t.Fatal(err)
	}
	a.wcs, b.wcs = nil, nil
	run(t, tb, func() bool { return again && len(a.wcs) > 0 && len(b.wcs) > 0 && conns == 2 })
	ca, sa := client.QP.Attr(), server.QP.Attr()
	switch {
	case client.QP.QPN() != qpA || server.QP.QPN() != qpB || ca.DestQPN != qpB || sa.DestQPN != qpA:
		t.Errorf("QPs %d→%d, %d→%d; want %d and %d kept", client.QP.QPN(), ca.DestQPN, server.QP.QPN(), sa.DestQPN, qpA, qpB)
	case ca.State != roce.StateRTS || sa.State != roce.StateRTS:
		t.Errorf("states %v and %v after the reconnection", ca.State, sa.State)
	case ca.SQPSN == oldA.SQPSN || sa.SQPSN == oldB.SQPSN || sa.RQPSN != ca.SQPSN || ca.RQPSN != sa.SQPSN:
		t.Errorf("PSNs: client %#x/%#x (was %#x), server %#x/%#x (was %#x)", ca.SQPSN, ca.RQPSN, oldA.SQPSN, sa.SQPSN, sa.RQPSN, oldB.SQPSN)
	case client.Epoch != 1 || server.Epoch != 1 || readies != 2 || conns != 2:
		t.Errorf("epochs %d and %d, OnReady %d times, onConn %d times; want 1, 1, 2, 2", client.Epoch, server.Epoch, readies, conns)
	case a.wcs[0].Status != roce.StatusSuccess || a.wcs[0].WRID != 2 || b.wcs[0].Status != roce.StatusSuccess || b.wcs[0].ByteLen != 5:
		t.Errorf("completions after the reconnection: a %v, b %v", a.wcs, b.wcs)
	}
	// Nothing more happens: late duplicates of either epoch's messages
	// start no third epoch.
	if err := tb.Run(context.Background(), 10*time.Microsecond, time.Second, func() bool { return false }); !errors.Is(err, testbed.ErrStalled) {
		t.Fatalf("run to the end: %v", err)
	}
	if server.Epoch != 1 || readies != 2 || server.QP.State() != roce.StateRTS {
		t.Errorf("after the exchange: epoch %d, OnReady %d times, server QP %v", server.Epoch, readies, server.QP.State())
	}

	// Only the side that connected re-establishes.
	if err := server.Reconnect(nil); err == nil {
		t.Error("the passive side re-established a connection")
	}
}
