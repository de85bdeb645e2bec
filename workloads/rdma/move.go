package rdma

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/roce"
	"github.com/tracebed/tracebed/emulator/roce/cm"
	"github.com/tracebed/tracebed/emulator/testbed"
	"github.com/tracebed/tracebed/experiments"
	"github.com/tracebed/tracebed/p4/fwd"
)

// Service is the connection manager's service id of the demo.
const Service = 4791

// RunLimit is how much testbed time a move may take before it fails:
// validate refuses a move that cannot finish within it at the links' rate.
const RunLimit = time.Minute

// The connection manager's timer and retries: the passive side waits
// about cmTimeout × cmRetries for the RTU, which leaves h1 behind the
// first window of requests (checkPace).
const (
	cmTimeout = 5 * time.Millisecond
	cmRetries = 40
)

// guard is the size of the canaries on both sides of h2's target: the
// region h2 registers (and lets h1 write) is larger than the target, so a
// write outside the target would land in a canary and be seen.
const (
	guard  = 4096
	canary = 0x5a
)

// Outcome is what one move measured.
type Outcome struct {
	Completion      time.Duration // first work request to the last completion that makes the data h2's
	Messages        int           // messages h2 saw complete (write_imm, send, read), or h1 (write)
	Packets         uint64        // RoCEv2 packets both devices sent
	DataPackets     uint64        // of which SEND/WRITE requests and READ responses
	MinDataPackets  uint64        // the fewest data packets the buffer needs
	Timeouts        uint64
	SeqNAKs         uint64
	Duplicates      uint64
	Dropped         uint64
	IntegrityErrors int
	FirstError      string
	Counters        [2]roce.Counters // h1's and h2's devices
}

// host is one side of the demo. Everything in it is touched only on its
// device's goroutine (or after the testbed is closed).
type host struct {
	dev  *roce.Device
	m    *cm.Manager
	env  emulator.Env
	conn *cm.Conn
	qp   *roce.QP // h2: its QP, from when it can receive
	mr   *roce.MR // h1: the source; h2: the target between two canaries
	aux  *roce.MR // h2: the receive buffer of the immediates

	posted, completed int // work requests of the side that posts them
	nextRecv          int // h2: the receive request to post next
	delivered         int // h2: messages checked
	start, end        time.Duration
	finished          bool
	failed            error
	errs              int
	firstErr          string
}

func (h *host) integrity(format string, args ...any) {
	if h.errs == 0 {
		h.firstErr = fmt.Sprintf(format, args...)
	}
	h.errs++
}

// demo is one run: h1 holds the buffer, h2 receives it.
type demo struct {
	p     Params
	verb  string
	src   []byte // h1's source bytes (never written once set up)
	n     int    // messages
	h1    *host
	h2    *host
	qpCfg roce.QPConfig
}

// size returns the length of message i.
func (d *demo) size(i int) int {
	msg := int(d.p.Message)
	return min(msg, int(d.p.Bytes)-i*msg)
}

// Move runs one roce-demo move of p.Bytes with verb on a testbed built by
// newTB, checking the data as it lands and once more at the end.
func Move(ctx context.Context, newTB experiments.TestbedFactory, p Params, verb string, seed uint64, progress func(float64)) (*Outcome, error) {
	top, err := Topology(p)
	if err != nil {
		return nil, err
	}
	fwdProg := fwd.SwitchProgram()
	tb, err := newTB(ctx, testbed.Config{Topology: top, Program: &fwdProg, Seed: seed})
	if err != nil {
		return nil, err
	}
	closed := false
	defer func() {
		if !closed {
			tb.Close()
		}
	}()
	if err := checkMTU(tb, p.MTU); err != nil {
		return nil, err
	}
	d := &demo{p: p, verb: verb, n: int((p.Bytes + p.Message - 1) / p.Message)}
	d.src = make([]byte, p.Bytes)
	r := rand.New(rand.NewPCG(seed, 0x726f6365))
	for i := range d.src {
		if i%(1<<20) == 0 && ctx.Err() != nil { // a large buffer takes seconds to fill
			return nil, fmt.Errorf("%s of %v not started: %w", verb, p.Bytes, ctx.Err())
		}
		d.src[i] = byte(r.Uint32())
	}
	code := timeoutCode(time.Duration(p.Timeout))
	var h1p cm.Params
	peer := top.Hosts()[1].IP
	newHost := func(onStart func(*roce.Device)) (*host, error) {
		dev, err := roce.NewDevice(roce.Config{MTU: p.MTU, Window: p.Window, OnStart: onStart})
		if err != nil {
			return nil, err
		}
		// The connection manager answers within a few round trips; its
		// timer waits for the slower of the substrates.
		return &host{dev: dev, m: cm.New(dev, cm.Config{Timeout: cmTimeout, Retries: cmRetries})}, nil
	}
	// h1 connects as soon as its device starts.
	if d.h1, err = newHost(func(*roce.Device) {
		if err := d.h1.m.Connect(peer, Service, h1p, d.h1Established); err != nil {
			d.h1.failed = err
		}
	}); err != nil {
		return nil, err
	}
	if d.h2, err = newHost(nil); err != nil {
		return nil, err
	}
	if d.h1.mr, err = d.h1.dev.RegMR(d.src, roce.AccessRemoteRead); err != nil {
		return nil, err
	}
	dst := bytes.Repeat([]byte{canary}, int(p.Bytes)+2*guard)
	if d.h2.mr, err = d.h2.dev.RegMR(dst, roce.AccessLocalWrite|roce.AccessRemoteWrite); err != nil {
		return nil, err
	}
	if d.h2.aux, err = d.h2.dev.RegMR(make([]byte, 64), roce.AccessLocalWrite); err != nil {
		return nil, err
	}
	base := cm.Params{MTU: p.MTU, Timeout: code, ReadDepth: min(p.Outstanding, 16)}
	recvs := min(d.n, max(256, p.Outstanding))
	base.QP = roce.QPConfig{MaxSendWR: p.Outstanding, MaxRecvWR: recvs}
	h2p := base
	h2p.QP.SendCQ = d.h2.dev.CreateCQ(d.h2Completion)
	h2p.QP.RecvCQ = h2p.QP.SendCQ
	h2p.Region = cm.Region{Addr: d.h2.mr.Addr + guard, RKey: d.h2.mr.RKey, Length: uint32(p.Bytes)}
	h2p.OnReady = func(c *cm.Conn) {
		d.h2.qp = c.QP
		for range recvs {
			d.postRecv()
		}
	}
	if err := d.h2.m.Listen(Service, h2p, d.h2Established); err != nil {
		return nil, err
	}
	h1p = base
	h1p.QP.SendCQ = d.h1.dev.CreateCQ(d.h1Completion)
	h1p.QP.RecvCQ = h1p.QP.SendCQ
	h1p.Region = cm.Region{Addr: d.h1.mr.Addr, RKey: d.h1.mr.RKey, Length: uint32(p.Bytes)}
	hosts := top.Hosts()
	if d.h2.env, err = cm.Attach(tb, hosts[1].Name, d.h2.dev, d.h2.m); err != nil {
		return nil, err
	}
	if d.h1.env, err = cm.Attach(tb, hosts[0].Name, d.h1.dev, d.h1.m); err != nil {
		return nil, err
	}
	done := func() bool {
		var fin, fail bool
		var got int
		for _, h := range []*host{d.h1, d.h2} {
			tb.Inspect(h.env, func() {
				fail = fail || h.failed != nil
				if h.finished {
					fin = true
				}
				got += h.delivered + h.completed
			})
		}
		if progress != nil {
			progress(float64(got) / float64(2*d.n))
		}
		return fin || fail
	}
	runErr := tb.Run(ctx, time.Millisecond, RunLimit, done)
	closed = true
	if err := tb.Close(); err != nil {
		return nil, err
	}
	// The agents have stopped: their state may be read directly.
	for _, h := range []*host{d.h1, d.h2} {
		if h.failed != nil {
			return nil, fmt.Errorf("%w (h1: %v%s; h2: %v%s)", h.failed, d.h1.dev.Counters(), sendErrors(d.h1.env), d.h2.dev.Counters(), sendErrors(d.h2.env))
		}
	}
	if runErr != nil {
		return nil, fmt.Errorf("%s of %v not done (h1: %d of %d work requests complete; h2: %d messages; h1 %v; h2 %v): %w",
			verb, p.Bytes, d.h1.completed, d.n, d.h2.delivered, d.h1.dev.Counters(), d.h2.dev.Counters(), runErr)
	}
	return d.outcome(), nil
}

// sendErrors describes the datagrams a real socket failed to send.
func sendErrors(env emulator.Env) string {
	if s, ok := env.(interface{ SendErrors() (uint64, error) }); ok {
		if n, err := s.SendErrors(); n > 0 {
			return fmt.Sprintf(", %d sends failed (%v)", n, err)
		}
	}
	return ""
}

// outcome gathers the counters and checks the target once more: every
// byte of the buffer in place, both canaries intact.
func (d *demo) outcome() *Outcome {
	o := &Outcome{Counters: [2]roce.Counters{d.h1.dev.Counters(), d.h2.dev.Counters()}}
	poster := d.h1
	if d.verb == VerbRead {
		poster = d.h2
	}
	o.Completion = poster.end - poster.start
	if d.verb != VerbWrite {
		o.Completion = d.h2.end - poster.start
	}
	o.Messages = d.h2.delivered
	if d.verb == VerbWrite {
		o.Messages = d.h1.completed
	}
	for _, c := range o.Counters {
		o.Packets += c.TxPackets
		o.DataPackets += c.DataPackets
		o.Timeouts += c.Timeouts
		o.SeqNAKs += c.SeqNAKsSent
		o.Duplicates += c.Duplicates
		o.Dropped += c.Dropped()
	}
	for i := range d.n {
		o.MinDataPackets += uint64(max(1, (d.size(i)+d.p.MTU-1)/d.p.MTU))
	}
	h := d.h2
	buf := h.mr.Buf
	if bad := countDiff(buf[guard:guard+len(d.src)], d.src); bad > 0 {
		h.integrity("%d bytes of the target differ from the source", bad)
	}
	for _, c := range [][]byte{buf[:guard], buf[guard+len(d.src):]} {
		for i, v := range c {
			if v != canary {
				h.integrity("a canary next to the target was overwritten (byte %d)", i)
				break
			}
		}
	}
	if o.Messages != d.n {
		h.integrity("%d of %d messages completed", o.Messages, d.n)
	}
	o.IntegrityErrors = d.h1.errs + d.h2.errs
	o.FirstError = d.h2.firstErr
	if o.FirstError == "" {
		o.FirstError = d.h1.firstErr
	}
	return o
}

func countDiff(a, b []byte) int {
	if bytes.Equal(a, b) {
		return 0
	}
	n := 0
	for i := range a {
		if a[i] != b[i] {
			n++
		}
	}
	return n
}

// h1Established starts h1's work requests (write, write_imm, send).
func (d *demo) h1Established(c *cm.Conn, err error) {
	h := d.h1
	if err != nil {
		h.failed = err
		return
	}
	h.conn = c
	if d.verb == VerbRead {
		return // h2 reads
	}
	h.start = h.dev.Env().Now()
	for range d.p.Outstanding {
		d.postNext(h)
	}
}

// h2Established starts h2's READs.
func (d *demo) h2Established(c *cm.Conn) {
	h := d.h2
	h.conn = c
	if d.verb != VerbRead {
		return
	}
	h.start = h.dev.Env().Now()
	for range d.p.Outstanding {
		d.postNext(h)
	}
}

// postNext posts the next work request of h, if any is left.
func (d *demo) postNext(h *host) {
	i := h.posted
	if i >= d.n {
		return
	}
	msg := int(d.p.Message)
	n := d.size(i)
	wr := roce.SendWR{ID: uint64(i), Signaled: true, Imm: uint32(i)}
	remote := h.conn.Remote
	switch d.verb {
	case VerbWrite, VerbWriteImm:
		wr.Op = roce.OpWrite
		if d.verb == VerbWriteImm {
			wr.Op = roce.OpWriteImm
		}
		wr.Local = h.mr.SGE(i*msg, n)
		wr.Remote, wr.RKey = remote.Addr+uint64(i*msg), remote.RKey
	case VerbSend:
		wr.Op = roce.OpSend
		wr.Local = h.mr.SGE(i*msg, n)
	case VerbRead:
		wr.Op = roce.OpRead
		wr.Local = h.mr.SGE(guard+i*msg, n)
		wr.Remote, wr.RKey = remote.Addr+uint64(i*msg), remote.RKey
	}
	if err := h.conn.QP.PostSend(wr); err != nil {
		h.failed = fmt.Errorf("post %s %d: %w", d.verb, i, err)
		return
	}
	h.posted++
}

// postRecv posts h2's next receive request: a SEND lands in its slice of
// the target; a WRITE with immediate needs one too, for its immediate.
func (d *demo) postRecv() {
	h := d.h2
	i := h.nextRecv
	if i >= d.n || d.verb == VerbWrite || d.verb == VerbRead {
		return
	}
	sge := h.aux.SGE(0, 0)
	if d.verb == VerbSend {
		sge = h.mr.SGE(guard+i*int(d.p.Message), d.size(i))
	}
	if err := h.qp.PostRecv(roce.RecvWR{ID: uint64(i), Local: sge}); err != nil {
		h.failed = fmt.Errorf("post receive %d: %w", i, err)
		return
	}
	h.nextRecv++
}

// failure turns an unsuccessful completion into the run's error.
func failure(h *host, c roce.Completion) bool {
	if c.Status == roce.StatusSuccess {
		return false
	}
	if h.failed == nil {
		h.failed = fmt.Errorf("completion %v: %w", c, errFailed)
	}
	return true
}

var errFailed = errors.New("work request failed")

func (d *demo) h1Completion(c roce.Completion) {
	h := d.h1
	if failure(h, c) {
		return
	}
	if c.WRID != uint64(h.completed) {
		h.integrity("h1 completion of work request %d, expected %d", c.WRID, h.completed)
	}
	h.completed++
	if h.completed == d.n {
		h.end = h.dev.Env().Now()
		if d.verb == VerbWrite {
			h.finished = true
		}
	}
	d.postNext(h)
}

// h2Completion checks each message as it completes at h2: the next one in
// order, not seen before, its bytes in place.
func (d *demo) h2Completion(c roce.Completion) {
	h := d.h2
	if failure(h, c) {
		return
	}
	i := h.delivered
	switch {
	case d.verb == VerbRead && c.Opcode == roce.WCRead:
		if c.WRID != uint64(i) {
			h.integrity("READ %d completed when %d was due", c.WRID, i)
		}
		h.completed++
	case d.verb == VerbWriteImm && c.Opcode == roce.WCRecvWriteImm:
		if !c.HasImm || c.Imm != uint32(i) {
			h.integrity("WRITE with immediate %d arrived when %d was due (a message lost, duplicated or out of order)", c.Imm, i)
		}
	case d.verb == VerbSend && c.Opcode == roce.WCRecv:
		if c.WRID != uint64(i) {
			h.integrity("SEND into receive %d when %d was due", c.WRID, i)
		}
	default:
		h.integrity("unexpected completion %v", c)
		return
	}
	if c.ByteLen != uint32(d.size(i)) {
		h.integrity("message %d: %d bytes, want %d", i, c.ByteLen, d.size(i))
	}
	off := i * int(d.p.Message)
	if bad := countDiff(h.mr.Buf[guard+off:guard+off+d.size(i)], d.src[off:off+d.size(i)]); bad > 0 {
		h.integrity("message %d complete with %d bytes not in place", i, bad)
	}
	h.delivered++
	if h.delivered == d.n {
		h.end = h.dev.Env().Now()
		h.finished = true
	}
	if d.verb == VerbRead {
		d.postNext(h)
	} else {
		d.postRecv()
	}
}
