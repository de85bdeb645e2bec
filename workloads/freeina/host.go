package freeina

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/roce"
	"github.com/tracebed/tracebed/emulator/roce/cm"
	"github.com/tracebed/tracebed/emulator/roce/wire"
)

// Connection-manager services of a run: the control service on the
// controller host, and per job the INA ring (a worker listens for its
// predecessor) and the PS path (the parameter server listens for the
// job's workers).
const (
	serviceControl = 1
	serviceINA     = 1 << 32
	servicePS      = 2 << 32
)

// host is one RDMA host of a run: its device and connection manager, the
// control channel, and the roles it plays — the worker of at most one job
// at a time, the parameter server of any number, the controller. Its
// fields are touched only on the device's goroutine (or after the testbed
// is closed).
type host struct {
	run  *run
	name string
	ip   netip.Addr
	dev  *roce.Device
	mgr  *cm.Manager
	// env is the device's Env as the testbed attached it: the one to
	// Inspect from outside (the device learns its own on Start).
	env emulator.Env
	cq  *roce.CQ
	// handlers dispatch completions by QP number.
	handlers map[uint32]func(roce.Completion)

	ctl    *channel // workers and PS hosts: to the controller
	worker *worker
	ps     map[uint32]*psJob
	boss   *controller // the controller host

	failed  error
	checkEr int    // RC-check violations seen here
	firstEr string // the first one
	// giveUps counts this host's INA connections whose retries ran out,
	// reconnects those it re-established.
	giveUps, reconnects int
	// The ICRC state of the last sender inspect saw (as the device keeps
	// its own): the pseudo-header is folded once per peer, not per packet.
	rxFrom emulator.Addr
	rxCRC  wire.PseudoCRC
}

func (h *host) fail(err error) {
	if h.failed == nil {
		h.failed = fmt.Errorf("%s: %w", h.name, err)
	}
}

// violation records a breach of the RC contract seen at this host.
func (h *host) violation(format string, args ...any) {
	if h.checkEr == 0 {
		h.firstEr = fmt.Sprintf("%s: %s", h.name, fmt.Sprintf(format, args...))
	}
	h.checkEr++
}

// complete dispatches a completion to the handler of its QP.
func (h *host) complete(c roce.Completion) {
	if f := h.handlers[c.QPN]; f != nil {
		f(c)
		return
	}
	if c.Status != roce.StatusSuccess && c.Status != roce.StatusWRFlushErr {
		h.fail(fmt.Errorf("completion on QP %d, which has no owner: %v", c.QPN, c))
	}
}

// params are the connection-manager parameters of a connection of this
// run: completions to the host's queue, its handler, the run's RC timers.
func (h *host) params(mtu int, region cm.Region, private []byte) cm.Params {
	r := h.run
	return cm.Params{QP: roce.QPConfig{SendCQ: h.cq, RecvCQ: h.cq, MaxSendWR: 1 << 14, MaxRecvWR: 1 << 14},
		MTU: mtu, Region: region, Private: private, Timeout: r.timeoutCode, RetryCnt: 7, RNRRetry: 7}
}

// tap is the agent bound to UDP 4791 in place of the device: it checks
// every RoCEv2 packet that reaches the host (wire.go) before the device
// handles it.
type tap struct{ h *host }

func (t tap) Start(env emulator.Env) { t.h.dev.Start(env) }

func (t tap) Recv(from emulator.Addr, b []byte) {
	t.h.inspect(from, b)
	t.h.dev.Recv(from, b)
}

// BorrowsPayload keeps the device's promise: neither keeps b.
func (t tap) BorrowsPayload() bool { return true }

// channel is a control connection: RDMA SENDs of control messages, with
// receive buffers kept posted and send buffers held until their SEND is
// acknowledged (a retransmission is rebuilt from them).
type channel struct {
	h       *host
	conn    *cm.Conn
	rbuf    *roce.MR
	sbuf    *roce.MR
	free    []int // free send slots
	queue   [][]byte
	handler func(ctlMsg)
}

const (
	ctlRecvs = 64
	ctlSends = 256
)

// newChannel makes the buffers of a control connection and takes over
// its QP's completions; handler gets every message in order.
func newChannel(h *host, conn *cm.Conn, handler func(ctlMsg)) (*channel, error) {
	c := &channel{h: h, conn: conn, handler: handler}
	var err error
	if c.rbuf, err = h.dev.RegMR(make([]byte, ctlRecvs*maxCtl), roce.AccessLocalWrite); err != nil {
		return nil, err
	}
	if c.sbuf, err = h.dev.RegMR(make([]byte, ctlSends*maxCtl), 0); err != nil {
		return nil, err
	}
	for i := range ctlSends {
		c.free = append(c.free, ctlSends-1-i)
	}
	h.handlers[conn.QP.QPN()] = c.completion
	return c, nil
}

// postRecvs posts every receive buffer (before the peer may send).
func (c *channel) postRecvs(qp *roce.QP) error {
	for i := range ctlRecvs {
		if err := qp.PostRecv(roce.RecvWR{ID: uint64(i), Local: c.rbuf.SGE(i*maxCtl, maxCtl)}); err != nil {
			return err
		}
	}
	return nil
}

// send sends m (queued while every send buffer is in flight).
func (c *channel) send(m *ctlMsg) {
	b := m.encode(make([]byte, 0, maxCtl))
	if len(c.free) == 0 {
		c.queue = append(c.queue, b)
		return
	}
	c.post(b)
}

func (c *channel) post(b []byte) {
	slot := c.free[len(c.free)-1]
	c.free = c.free[:len(c.free)-1]
	copy(c.sbuf.Buf[slot*maxCtl:], b)
	err := c.conn.QP.PostSend(roce.SendWR{ID: uint64(slot), Op: roce.OpSend, Local: c.sbuf.SGE(slot*maxCtl, len(b)), Signaled: true})
	if err != nil {
		c.h.fail(fmt.Errorf("control send: %w", err))
	}
}

func (c *channel) completion(wc roce.Completion) {
	if wc.Status != roce.StatusSuccess {
		if c.h.run.finished() && wc.Status == roce.StatusWRFlushErr {
			return
		}
		c.h.fail(fmt.Errorf("control connection to %v: %v", c.conn.Peer, wc))
		return
	}
	switch wc.Opcode {
	case roce.WCSend:
		c.free = append(c.free, int(wc.WRID))
		if len(c.queue) > 0 {
			b := c.queue[0]
			c.queue = c.queue[1:]
			c.post(b)
		}
	case roce.WCRecv:
		i := int(wc.WRID)
		m, err := decodeCtl(c.rbuf.Buf[i*maxCtl : i*maxCtl+int(wc.ByteLen)])
		if err := c.conn.QP.PostRecv(roce.RecvWR{ID: wc.WRID, Local: c.rbuf.SGE(i*maxCtl, maxCtl)}); err != nil {
			c.h.fail(err)
			return
		}
		if err != nil {
			c.h.fail(fmt.Errorf("control message from %v: %w", c.conn.Peer, err))
			return
		}
		c.handler(m)
	}
}

// start is the device's OnStart: the controller host listens for control
// connections; the others connect to it.
func (h *host) start(*roce.Device) {
	h.cq = h.dev.CreateCQ(h.complete)
	if h.boss != nil {
		p := h.params(wire.MTUs[len(wire.MTUs)-1], cm.Region{}, nil)
		p.OnReady = func(c *cm.Conn) {
			ch, err := newChannel(h, c, nil)
			if err == nil {
				err = ch.postRecvs(c.QP)
			}
			if err != nil {
				h.fail(err)
				return
			}
			ch.handler = func(m ctlMsg) { h.boss.message(ch, m) }
			h.boss.pending[c.Peer] = ch
		}
		if err := h.mgr.Listen(serviceControl, p, func(c *cm.Conn) { h.boss.connected(c.Peer) }); err != nil {
			h.fail(err)
		}
		h.boss.start()
		return
	}
	p := h.params(wire.MTUs[len(wire.MTUs)-1], cm.Region{}, nil)
	// The receive buffers go up in done, before the controller may send:
	// it sends only once this host's connection is established, and a
	// SEND that finds none would be refused (RNR) and repeated.
	err := h.mgr.Connect(h.run.ctlIP, serviceControl, p, func(c *cm.Conn, err error) {
		if err != nil {
			h.fail(fmt.Errorf("control connection: %w", err))
			return
		}
		ch, err := newChannel(h, c, h.control)
		if err == nil {
			err = ch.postRecvs(c.QP)
		}
		if err != nil {
			h.fail(err)
			return
		}
		h.ctl = ch
	})
	if err != nil {
		h.fail(err)
	}
}

// control handles a message from the controller to a worker or PS host.
func (h *host) control(m ctlMsg) {
	switch m.Type {
	case msgLaunch:
		if h.worker != nil {
			h.fail(fmt.Errorf("launched for job %d while running job %d", m.Job, h.worker.job))
			return
		}
		w, err := newWorker(h, m)
		if err != nil {
			h.fail(err)
			return
		}
		h.worker = w
	case msgPSLaunch:
		p, err := newPSJob(h, m)
		if err != nil {
			h.fail(err)
			return
		}
		h.ps[m.Job] = p
	case msgConnect:
		if w := h.worker; w != nil && w.job == m.Job {
			w.connect()
		}
	case msgGo:
		if w := h.worker; w != nil && w.job == m.Job {
			w.goRound(m)
		}
	case msgStop:
		if w := h.worker; w != nil && w.job == m.Job {
			w.stopRound(int(m.Round))
		}
	case msgRecover:
		if w := h.worker; w != nil && w.job == m.Job {
			w.recover(int(m.Round), int(m.From))
		}
	case msgFinish:
		if w := h.worker; w != nil && w.job == m.Job {
			w.finish()
			h.worker = nil
		}
		if p := h.ps[m.Job]; p != nil {
			p.finish()
			delete(h.ps, m.Job)
		}
	default:
		h.fail(fmt.Errorf("unexpected control message %v", &m))
	}
}

// now is the host's clock.
func (h *host) now() time.Duration { return h.dev.Env().Now() }
