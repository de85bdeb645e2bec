package freeina

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/tracebed/tracebed/emulator/roce"
	"github.com/tracebed/tracebed/emulator/roce/cm"
	"github.com/tracebed/tracebed/emulator/roce/wire"
	sysfree "github.com/tracebed/tracebed/systems/freeina"
)

// Paths of a round, as GO carries them.
const (
	pathINA = 0
	pathPS  = 1
)

// imm is the immediate data of a chunk (or PS message) of round r: the
// round's low 7 bits, then the index in 24 bits; the top bit is the
// switch's overflow flag.
func imm(round, index int) uint32 { return uint32(round&0x7f)<<24 | uint32(index)&0xffffff }

// worker is a job's worker on one host: its gradient, its connections
// (INA: to its successor and from its predecessor, through the switch;
// PS: to the job's parameter server), and the round in progress.
type worker struct {
	h       *host
	job     uint32
	rank, n int
	succ    netip.Addr
	pred    netip.Addr
	psAddr  netip.Addr
	leader  bool
	k       int
	values  int
	chunks  int
	msgSize int // bytes per PS-path message
	msgs    int
	psWin   int // PS-path messages in flight at most
	acked   int // PS-path messages acknowledged this round
	iters   int
	compute []time.Duration
	seed    uint64
	psEst   time.Duration
	control sysfree.PathControl

	grad, res, psres, rq *roce.MR
	inaOut, inaIn, ps    *cm.Conn
	inaMTU               int
	sqPSN, rqPSN         uint32 // the INA connections' first PSNs, out and in
	posted               int    // INA chunks posted, over all rounds
	setupSent            bool

	round   int
	path    int
	window  int
	next    int // next chunk (or message) to post
	got     int // results received this round, in order
	sent    bool
	start   time.Duration
	lastINA time.Duration // the leader's last INA all-reduce time
	// inaRounds[r] is the number of INA rounds before round r whose
	// chunks the predecessor sent (for the wire check); known for rounds
	// up to the current one plus one.
	inaBefore map[int]int
	want      map[int][]int32 // expected sums by round (wire check, verification)
}

// newWorker sets a job's worker up from its launch message: its buffers,
// and a listener for its predecessor's INA connection.
func newWorker(h *host, m ctlMsg) (*worker, error) {
	w := &worker{h: h, job: m.Job, rank: int(m.Rank), n: int(m.N), succ: m.Succ, pred: m.Pred, psAddr: m.PS, leader: m.Leader,
		k: int(m.K), values: int(m.Values), iters: int(m.Iterations), seed: m.Seed, psEst: m.PSEstimate, msgSize: int(m.Message),
		psWin:   max(1, int(m.PSWindow)),
		control: h.run.control, inaBefore: map[int]int{0: 0}, want: map[int][]int32{}}
	if w.k < 1 || w.values < w.k || w.values%w.k != 0 || w.n < 2 || w.rank >= w.n || w.iters < 1 || w.msgSize < 4 || w.msgSize%4 != 0 {
		return nil, fmt.Errorf("job %d: launch with %d values of k %d, rank %d of %d, %d iterations, messages of %d bytes", m.Job, w.values, w.k, w.rank, w.n, w.iters, w.msgSize)
	}
	w.chunks = w.values / w.k
	w.msgs = (4*w.values + w.msgSize - 1) / w.msgSize
	for _, mtu := range wire.MTUs {
		if mtu >= 4*w.k {
			w.inaMTU = mtu
			break
		}
	}
	if w.inaMTU == 0 {
		return nil, fmt.Errorf("job %d: %d values per packet do not fit a RoCE path MTU", m.Job, w.k)
	}
	w.compute = drawsOf(h.run, m, w.rank)
	var err error
	dev := h.dev
	if w.grad, err = dev.RegMR(make([]byte, 4*w.values), 0); err != nil {
		return nil, err
	}
	if w.res, err = dev.RegMR(make([]byte, 4*w.values), roce.AccessLocalWrite|roce.AccessRemoteWrite); err != nil {
		return nil, err
	}
	if w.psres, err = dev.RegMR(make([]byte, 4*w.values), roce.AccessLocalWrite|roce.AccessRemoteWrite); err != nil {
		return nil, err
	}
	if w.rq, err = dev.RegMR(make([]byte, 4), roce.AccessLocalWrite); err != nil {
		return nil, err
	}
	p := h.params(w.inaMTU, cm.Region{Addr: w.res.Addr, RKey: w.res.RKey, Length: uint32(4 * w.values)}, nil)
	p.OnReady = func(c *cm.Conn) {
		h.handlers[c.QP.QPN()] = w.inaInCompletion
		w.rqPSN = c.QP.Attr().RQPSN
		w.postRecvs(c.QP, min(w.chunks, 1<<13))
	}
	if err := h.mgr.Listen(serviceINA|uint64(w.job), p, func(c *cm.Conn) {
		if c.Peer != w.pred {
			h.fail(fmt.Errorf("job %d: INA connection from %v, want the predecessor %v", w.job, c.Peer, w.pred))
			return
		}
		w.inaIn = c
		w.setup()
	}); err != nil {
		return nil, err
	}
	h.ctl.send(&ctlMsg{Type: msgListening, Job: w.job})
	return w, nil
}

// postRecvs posts n receive requests for WRITEs with immediate (they
// carry no data into the receive buffer).
func (w *worker) postRecvs(qp *roce.QP, n int) {
	for range n {
		if err := qp.PostRecv(roce.RecvWR{Local: w.rq.SGE(0, 0)}); err != nil {
			w.h.fail(err)
			return
		}
	}
}

// connect opens the worker's INA connection to its successor and its PS
// connection, once every host of the job listens.
func (w *worker) connect() {
	h := w.h
	if err := h.mgr.Connect(w.succ, serviceINA|uint64(w.job), h.params(w.inaMTU, cm.Region{}, nil), func(c *cm.Conn, err error) {
		if err != nil {
			h.fail(fmt.Errorf("job %d: INA connection to %v: %w", w.job, w.succ, err))
			return
		}
		w.inaOut = c
		w.sqPSN = c.QP.Attr().SQPSN
		h.handlers[c.QP.QPN()] = w.sendCompletion
		w.setup()
	}); err != nil {
		h.fail(err)
		return
	}
	var rank [4]byte
	binary.BigEndian.PutUint32(rank[:], uint32(w.rank))
	p := h.params(wire.MTUs[len(wire.MTUs)-1], cm.Region{Addr: w.psres.Addr, RKey: w.psres.RKey, Length: uint32(4 * w.values)}, rank[:])
	p.OnReady = func(c *cm.Conn) {
		h.handlers[c.QP.QPN()] = w.psCompletion
		w.postRecvs(c.QP, min(2*w.msgs, 1<<13))
	}
	if err := h.mgr.Connect(w.psAddr, servicePS|uint64(w.job), p, func(c *cm.Conn, err error) {
		if err != nil {
			h.fail(fmt.Errorf("job %d: PS connection to %v: %w", w.job, w.psAddr, err))
			return
		}
		w.ps = c
		w.setup()
	}); err != nil {
		h.fail(err)
	}
}

// setup reports the worker's INA connection once all three are up, and
// starts round 0.
func (w *worker) setup() {
	if w.setupSent || w.inaIn == nil || w.inaOut == nil || w.ps == nil {
		return
	}
	w.setupSent = true
	w.h.ctl.send(&ctlMsg{Type: msgSetup, Job: w.job, Rank: uint32(w.rank), QPN: w.inaOut.QP.Attr().DestQPN,
		RKey: w.inaOut.Remote.RKey, VA: w.inaOut.Remote.Addr, PSN: w.sqPSN})
	w.computeRound()
}

// computeRound computes round w.round, then fills its gradient and asks
// the controller to all-reduce it.
func (w *worker) computeRound() {
	w.h.dev.Env().After(w.compute[w.round], func() {
		fill(w.grad.Buf, w.gradient(w.rank, w.round))
		m := ctlMsg{Type: msgReady, Job: w.job, Round: uint32(w.round), Rank: uint32(w.rank),
			PSN: wire.PSNAdd(w.sqPSN, w.posted), Wants: true}
		if w.leader {
			m.Wants, m.Took = w.control.Wants(), w.lastINA
		}
		w.h.ctl.send(&m)
	})
}

// gradient returns rank's gradient of round r: int32 values of magnitude
// below 2^23, so that 32 workers' sum cannot overflow.
func (w *worker) gradient(rank, r int) []int32 {
	g := make([]int32, w.values)
	rng := rand.New(rand.NewPCG(w.seed^uint64(w.job)<<40, uint64(rank)<<32|uint64(r)))
	for i := range g {
		g[i] = int32(rng.Uint32()>>8) - 1<<23
	}
	return g
}

// expected returns the exact sum of round r (every worker's gradient),
// computed once per run for all the job's workers.
func (w *worker) expected(r int) []int32 {
	if s, ok := w.want[r]; ok {
		return s
	}
	s := w.h.run.sum(w.job, r, func() []int32 {
		s := make([]int32, w.values)
		for rank := range w.n {
			for i, v := range w.gradient(rank, r) {
				s[i] += v
			}
		}
		return s
	})
	for old := range w.want {
		if old < r-2 {
			delete(w.want, old)
		}
	}
	w.want[r] = s
	return s
}

func fill(b []byte, v []int32) {
	for i, x := range v {
		binary.BigEndian.PutUint32(b[4*i:], uint32(x))
	}
}

// goRound starts the all-reduce of the current round on the path the
// controller says.
func (w *worker) goRound(m ctlMsg) {
	if int(m.Round) != w.round {
		w.h.fail(fmt.Errorf("job %d: go for round %d in round %d", w.job, m.Round, w.round))
		return
	}
	w.path, w.window = int(m.Path), int(m.Window)
	if w.leader {
		w.control.Choose(w.path == pathINA)
	}
	w.next, w.got, w.sent = 0, 0, false
	w.start = w.h.now()
	if w.path == pathINA {
		w.inaBefore[w.round+1] = w.inaBefore[w.round] + 1
		if w.window < 1 {
			w.h.fail(fmt.Errorf("job %d: INA window %d", w.job, w.window))
			return
		}
		w.postChunks()
		return
	}
	w.inaBefore[w.round+1] = w.inaBefore[w.round]
	w.acked = 0
	w.postMessages()
}

// postMessages posts the PS-path messages the window allows. The window
// keeps the job's incast into the parameter server's link within that
// link's buffer: RoCE has no loss recovery to spare on a lossy fabric
// (real deployments add PFC or DCQCN), and the PS's link is the PS
// path's bottleneck anyway.
func (w *worker) postMessages() {
	for w.next < w.msgs && w.next < w.acked+w.psWin {
		w.postMessage(w.next)
		w.next++
	}
}

// postChunks posts the chunks the window allows: chunk c once the result
// of chunk c − window is in, in chunk order (their PSNs number them at
// the switch).
func (w *worker) postChunks() {
	for w.next < w.chunks && w.next < w.got+w.window {
		c := w.next
		wr := roce.SendWR{ID: uint64(c), Op: roce.OpWriteImm, Local: w.grad.SGE(4*w.k*c, 4*w.k),
			Remote: w.inaOut.Remote.Addr + uint64(4*w.k*c), RKey: w.inaOut.Remote.RKey, Imm: imm(w.round, c),
			Signaled: c == w.chunks-1}
		if err := w.inaOut.QP.PostSend(wr); err != nil {
			w.h.fail(err)
			return
		}
		w.next++
		w.posted++
	}
}

// postMessage posts message i of the gradient to the parameter server, at
// the worker's place in its region.
func (w *worker) postMessage(i int) {
	off := i * w.msgSize
	n := min(w.msgSize, 4*w.values-off)
	wr := roce.SendWR{ID: uint64(i), Op: roce.OpWriteImm, Local: w.grad.SGE(off, n),
		Remote: w.ps.Remote.Addr + uint64(4*w.values*w.rank+off), RKey: w.ps.Remote.RKey, Imm: imm(w.round, i),
		Signaled: true}
	if err := w.ps.QP.PostSend(wr); err != nil {
		w.h.fail(err)
	}
}

// sendCompletion: the INA connection's last chunk of the round is
// acknowledged (so is every one before it).
func (w *worker) sendCompletion(c roce.Completion) {
	if w.sendFailed(c) {
		return
	}
	w.sent = true
	w.maybeDone()
}

func (w *worker) sendFailed(c roce.Completion) bool {
	if c.Status == roce.StatusSuccess {
		return false
	}
	// A flush after the worker's last round is its peers tearing the
	// job's connections down.
	if c.Status != roce.StatusWRFlushErr || w.round < w.iters && !w.h.run.finished() {
		w.h.fail(fmt.Errorf("job %d round %d: %v", w.job, w.round, c))
	}
	return true
}

// inaInCompletion: a result from the predecessor's connection. RC
// delivers them exactly once, in order: chunk got of the round.
func (w *worker) inaInCompletion(c roce.Completion) {
	if c.Status != roce.StatusSuccess {
		w.sendFailed(c)
		return
	}
	w.postRecvs(w.inaIn.QP, 1)
	want := imm(w.round, w.got)
	switch {
	case w.path != pathINA:
		w.h.violation("job %d round %d: an INA result (imm %#x) in a PS round", w.job, w.round, c.Imm)
		return
	case c.Imm&OverflowFlag != 0:
		w.h.fail(fmt.Errorf("job %d round %d chunk %d: the sum overflowed int32", w.job, w.round, w.got))
		return
	case c.Imm != want:
		w.h.violation("job %d round %d: result imm %#x, want %#x (every message once, in order)", w.job, w.round, c.Imm, want)
	}
	w.got++
	w.postChunks()
	w.maybeDone()
}

// psCompletion: the PS connection's sends (the last message of the
// round) and results.
func (w *worker) psCompletion(c roce.Completion) {
	if c.Opcode == roce.WCWrite {
		if !w.sendFailed(c) {
			w.acked++
			w.sent = w.acked == w.msgs
			w.postMessages()
			w.maybeDone()
		}
		return
	}
	if c.Status != roce.StatusSuccess {
		w.sendFailed(c)
		return
	}
	w.postRecvs(w.ps.QP, 1)
	if want := imm(w.round, w.got); w.path != pathPS || c.Imm != want {
		w.h.violation("job %d round %d: PS result imm %#x, want %#x in a round on path %d", w.job, w.round, c.Imm, want, w.path)
	}
	w.got++
	w.maybeDone()
}

// maybeDone ends the round when every result is in and every one of the
// worker's packets acknowledged: it verifies the sum and reports.
func (w *worker) maybeDone() {
	total := w.chunks
	buf := w.res.Buf
	if w.path == pathPS {
		total, buf = w.msgs, w.psres.Buf
	}
	if w.got < total || !w.sent {
		return
	}
	took := w.h.now() - w.start
	m := ctlMsg{Type: msgDone, Job: w.job, Round: uint32(w.round), Rank: uint32(w.rank), OK: true, Took: took}
	want := w.expected(w.round)
	for i, v := range want {
		if got := int32(binary.BigEndian.Uint32(buf[4*i:])); got != v {
			m.OK, m.Err = false, fmt.Sprintf("value %d of round %d is %d, want %d", i, w.round, got, v)
			break
		}
	}
	if w.leader && w.path == pathINA {
		w.lastINA = took
		w.control.Report(took, w.psEst)
	}
	m.Errs = uint32(w.h.checkEr)
	w.h.ctl.send(&m)
	w.round++
	w.got = 0
	if w.round < w.iters {
		w.computeRound()
	}
}

// finish tears the job's connections down.
func (w *worker) finish() {
	for _, c := range []*cm.Conn{w.inaOut, w.inaIn, w.ps} {
		if c != nil {
			delete(w.h.handlers, c.QP.QPN())
			c.Disconnect()
		}
	}
}

// OverflowFlag is the switch's overflow flag in a result's immediate.
const OverflowFlag = 1 << 31
