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
// round's low 7 bits, then the index in 24 bits. The top bit is a flag:
// on an INA result the switch's overflow flag (OverflowFlag); on the PS
// path, from a worker, a recovery (recoverFlag: its index is a chunk's,
// re-aggregated after it failed on INA), and from the parameter server,
// sums in 64 bits (wideFlag).
func imm(round, index int) uint32 { return uint32(round&0x7f)<<24 | uint32(index)&0xffffff }

// The PS path's flags in the immediate's top bit.
const (
	recoverFlag = 1 << 31
	wideFlag    = 1 << 31
)

// unitWR marks the work requests of recovered chunks (their WR ids).
const unitWR = 1 << 32

// worker is a job's worker on one host: its gradient, its connections
// (INA: to its successor and from its predecessor, through the switch;
// PS: to the job's parameter server), and the round in progress.
//
// Recovery (docs/freeina.md §4). Chunks fail on the INA path in two ways:
// the switch flags a chunk's sum as overflowed (its 32-bit registers
// cannot hold it), or an INA connection gives up (its requester's
// retries ran out: the switch stopped answering, a link dropped
// everything). Either ends the round's INA part at this worker (stop:
// the stopped message); a connection that gave up stops every worker of
// the job (the controller's stop). Once every worker has stopped, the
// controller names the first chunk some worker lacks (recover), and the
// workers re-aggregate on the PS path, chunk by chunk, that chunk and
// every one after it, and the overflowed ones before it; the server sums
// in 64 bits. An INA connection whose chunks were not all acknowledged
// is re-established meanwhile (cm.Conn.Reconnect: its QPs reset, fresh
// PSNs), the others kept. The round then ends as any other.
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

	// grad holds two gradients, by round parity: a round's stays until
	// every worker holds its sum (a recovery may need it after this
	// worker has finished). psres holds the PS path's sums: 32-bit ones,
	// then 64-bit ones (wide, at twice the offset after them).
	grad, res, psres, rq *roce.MR
	inaOut, inaIn, ps    *cm.Conn
	inaMTU               int
	sqPSN                uint32 // the INA connection's first PSN out (of its epoch)
	posted               int    // INA chunks posted (in its epoch)
	setupSent            bool

	round   int
	begun   bool // the current round's go came
	path    int
	window  int
	next    int // next chunk (or message) to post
	got     int // results received this round, in order
	sent    bool
	start   time.Duration
	lastINA time.Duration // the leader's last INA all-reduce time
	// flagged marks the chunks of the last INA round whose result carries
	// the switch's overflow flag (nflag of them); recovered the chunks of
	// the last INA round re-aggregated on the PS path; wideMsg the
	// messages of the last PS round whose sums came in 64 bits.
	flagged, recovered, wideMsg []bool
	nflag                       int
	stopped                     bool      // the current round's INA part is over early (stopped sent)
	stoppedRound                int       // the last round whose INA part stopped early (−1: none)
	rec                         *recovery // a recovery pass in progress
	reconnecting                bool      // the INA connection out is being re-established
	// inPSN is the PSN the predecessor's next INA round starts at on the
	// connection in; inaPSN the PSN of chunk 0 of the INA rounds begun
	// (for the wire check: late duplicates of earlier ones, of an
	// earlier epoch of the connection too).
	inPSN  uint32
	inaPSN map[int]uint32
	want   map[int][]int64 // expected sums by round (wire check, verification)
}

// recovery is a round's chunks re-aggregated on the PS path.
type recovery struct {
	round  int
	chunks []int // in order
	win    int   // chunks in flight at most
	next   int   // next to post
	acked  int   // posted and acknowledged
	got    int   // sums received, in order
}

// newWorker sets a job's worker up from its launch message: its buffers,
// and a listener for its predecessor's INA connection.
func newWorker(h *host, m ctlMsg) (*worker, error) {
	w := &worker{h: h, job: m.Job, rank: int(m.Rank), n: int(m.N), succ: m.Succ, pred: m.Pred, psAddr: m.PS, leader: m.Leader,
		k: int(m.K), values: int(m.Values), iters: int(m.Iterations), seed: m.Seed, psEst: m.PSEstimate, msgSize: int(m.Message),
		psWin:   max(1, int(m.PSWindow)),
		control: h.run.control, inaPSN: map[int]uint32{}, want: map[int][]int64{}, stoppedRound: -1}
	if w.k < 1 || w.values < w.k || w.values%w.k != 0 || w.n < 2 || w.rank >= w.n || w.iters < 1 || w.msgSize < 4 || w.msgSize%4 != 0 {
		return nil, fmt.Errorf("job %d: launch with %d values of k %d, rank %d of %d, %d iterations, messages of %d bytes", m.Job, w.values, w.k, w.rank, w.n, w.iters, w.msgSize)
	}
	w.chunks = w.values / w.k
	w.msgs = (4*w.values + w.msgSize - 1) / w.msgSize
	w.flagged, w.recovered, w.wideMsg = make([]bool, w.chunks), make([]bool, w.chunks), make([]bool, w.msgs)
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
	if w.grad, err = dev.RegMR(make([]byte, 2*4*w.values), 0); err != nil {
		return nil, err
	}
	if w.res, err = dev.RegMR(make([]byte, 4*w.values), roce.AccessLocalWrite|roce.AccessRemoteWrite); err != nil {
		return nil, err
	}
	if w.psres, err = dev.RegMR(make([]byte, (4+8)*w.values), roce.AccessLocalWrite|roce.AccessRemoteWrite); err != nil {
		return nil, err
	}
	if w.rq, err = dev.RegMR(make([]byte, 4), roce.AccessLocalWrite); err != nil {
		return nil, err
	}
	p := h.params(w.inaMTU, cm.Region{Addr: w.res.Addr, RKey: w.res.RKey, Length: uint32(4 * w.values)}, nil)
	// OnReady runs again when the predecessor re-establishes the
	// connection (a new epoch: its QP reset, a fresh PSN).
	p.OnReady = func(c *cm.Conn) {
		h.handlers[c.QP.QPN()] = w.inaInCompletion
		w.inPSN = c.QP.Attr().RQPSN
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
	p := h.params(wire.MTUs[len(wire.MTUs)-1], cm.Region{Addr: w.psres.Addr, RKey: w.psres.RKey, Length: uint32(len(w.psres.Buf))}, rank[:])
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
		fill(w.grad.Buf[w.gradAt(w.round):], w.gradient(w.rank, w.round))
		m := ctlMsg{Type: msgReady, Job: w.job, Round: uint32(w.round), Rank: uint32(w.rank),
			PSN: wire.PSNAdd(w.sqPSN, w.posted), Wants: true}
		if w.leader {
			m.Wants, m.Took = w.control.Wants(), w.lastINA
		}
		w.h.ctl.send(&m)
	})
}

// gradAt is the offset in grad of round r's gradient.
func (w *worker) gradAt(r int) int { return 4 * w.values * (r % 2) }

// gradient returns rank's gradient of round r: int32 values of magnitude
// below 2^23, so that 32 workers' sum cannot overflow — but for the
// chunks the run's Overflow share picks (the same for every worker of
// the round), whose values span the whole int32 range, the first of them
// at least 2^30 at every worker, so that their sum overflows the
// switch's 32 bits.
func (w *worker) gradient(rank, r int) []int32 {
	g := make([]int32, w.values)
	rng := rand.New(rand.NewPCG(w.seed^uint64(w.job)<<40, uint64(rank)<<32|uint64(r)))
	for i := range g {
		g[i] = int32(rng.Uint32()>>8) - 1<<23
	}
	if share := w.h.run.s.Overflow; share > 0 {
		pick := rand.New(rand.NewPCG(w.seed^uint64(w.job)<<40, 1<<63|uint64(r)))
		for c := range w.chunks {
			if pick.Float64() >= share {
				continue
			}
			vals := g[c*w.k : (c+1)*w.k]
			for i := range vals {
				vals[i] = int32(rng.Uint32())
			}
			vals[0] = int32(uint32(vals[0])>>2 | 1<<30)
		}
	}
	return g
}

// expected returns the exact sum of round r (every worker's gradient, in
// 64 bits), computed once per run for all the job's workers.
func (w *worker) expected(r int) []int64 {
	if s, ok := w.want[r]; ok {
		return s
	}
	s := w.h.run.sum(w.job, r, func() []int64 {
		s := make([]int64, w.values)
		for rank := range w.n {
			for i, v := range w.gradient(rank, r) {
				s[i] += int64(v)
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
	w.begun = true
	w.next, w.got, w.sent = 0, 0, false
	w.start = w.h.now()
	if w.path == pathINA {
		w.inaPSN[w.round] = w.inPSN
		w.inPSN = wire.PSNAdd(w.inPSN, w.chunks)
		delete(w.inaPSN, w.round-127)
		clear(w.flagged)
		clear(w.recovered)
		w.nflag = 0
		if w.window < 1 {
			w.h.fail(fmt.Errorf("job %d: INA window %d", w.job, w.window))
			return
		}
		w.postChunks()
		return
	}
	clear(w.wideMsg)
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
		wr := roce.SendWR{ID: uint64(c), Op: roce.OpWriteImm, Local: w.grad.SGE(w.gradAt(w.round)+4*w.k*c, 4*w.k),
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
	wr := roce.SendWR{ID: uint64(i), Op: roce.OpWriteImm, Local: w.grad.SGE(w.gradAt(w.round)+off, n),
		Remote: w.ps.Remote.Addr + uint64(4*w.values*w.rank+off), RKey: w.ps.Remote.RKey, Imm: imm(w.round, i),
		Signaled: true}
	if err := w.ps.QP.PostSend(wr); err != nil {
		w.h.fail(err)
	}
}

// sendCompletion: the INA connection's last chunk of the round is
// acknowledged (so is every one before it), or the connection gave up.
func (w *worker) sendCompletion(c roce.Completion) {
	switch {
	case c.Status == roce.StatusSuccess:
	case w.stopped:
		return // the connection's requests were abandoned with the round's INA part
	case (c.Status == roce.StatusRetryExcErr || c.Status == roce.StatusRNRRetryExcErr) && w.begun && w.path == pathINA:
		// The requester's retries ran out: the switch or the path to it
		// stopped answering. The round goes to the PS path.
		w.h.giveUps++
		w.stop(true)
		return
	default:
		w.sendFailed(c)
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
	case w.stopped || !w.begun && w.stoppedRound >= 0 && w.stoppedRound == w.round-1 && int(c.Imm>>24&0x7f) == w.stoppedRound&0x7f:
		// A result of a round whose INA part stopped (this one, or the
		// last, come before its connection was re-established): the PS
		// path gave it again (the wire check saw it exact).
		return
	case w.path != pathINA || !w.begun:
		w.h.violation("job %d round %d: an INA result (imm %#x) in a PS round", w.job, w.round, c.Imm)
		return
	case c.Imm&^OverflowFlag != want:
		w.h.violation("job %d round %d: result imm %#x, want %#x (every message once, in order)", w.job, w.round, c.Imm, want)
	}
	if c.Imm&OverflowFlag != 0 && w.got < w.chunks {
		// The sum overflowed the switch's 32 bits: the chunk goes to the
		// PS path, which sums wider.
		w.flagged[w.got] = true
		w.nflag++
	}
	w.got++
	w.postChunks()
	w.maybeDone()
}

// psCompletion: the PS connection's sends (the last message of the
// round, recovered chunks) and results.
func (w *worker) psCompletion(c roce.Completion) {
	if c.Opcode == roce.WCWrite {
		if w.sendFailed(c) {
			return
		}
		if c.WRID&unitWR != 0 {
			if w.rec != nil {
				w.rec.acked++
				w.postRecovered()
				w.recoveryDone()
			}
			return
		}
		w.acked++
		w.sent = w.acked == w.msgs
		w.postMessages()
		w.maybeDone()
		return
	}
	if c.Status != roce.StatusSuccess {
		w.sendFailed(c)
		return
	}
	w.postRecvs(w.ps.QP, 1)
	if rec := w.rec; rec != nil {
		if rec.got >= len(rec.chunks) || c.Imm != wideFlag|imm(rec.round, rec.chunks[rec.got]) {
			w.h.violation("job %d round %d: PS result imm %#x in the recovery of round %d, sum %d of %d", w.job, w.round, c.Imm, rec.round, rec.got, len(rec.chunks))
			return
		}
		rec.got++
		w.recoveryDone()
		return
	}
	if want := imm(w.round, w.got); w.path != pathPS || c.Imm&^wideFlag != want {
		w.h.violation("job %d round %d: PS result imm %#x, want %#x in a round on path %d", w.job, w.round, c.Imm, want, w.path)
	}
	if c.Imm&wideFlag != 0 && w.got < w.msgs {
		w.wideMsg[w.got] = true
	}
	w.got++
	w.maybeDone()
}

// maybeDone ends the round when every result is in and every one of the
// worker's packets acknowledged; an INA round with overflowed chunks
// stops to recover them.
func (w *worker) maybeDone() {
	if w.stopped || !w.begun {
		return
	}
	total := w.chunks
	if w.path == pathPS {
		total = w.msgs
	}
	if w.got < total || !w.sent {
		return
	}
	if w.path == pathINA && w.nflag > 0 {
		w.stop(false)
		return
	}
	w.finishRound(w.round, false, 0)
}

// finishRound verifies round r's sum, reports it done and, if it is the
// current round, moves on to the next. failed says the round's INA part
// failed (recovered chunks of it on the PS path).
func (w *worker) finishRound(r int, failed bool, recovered int) {
	took := w.h.now() - w.start
	m := ctlMsg{Type: msgDone, Job: w.job, Round: uint32(r), Rank: uint32(w.rank), OK: true, Took: took, Recovered: uint32(recovered)}
	if err := w.verify(r); err != "" {
		m.OK, m.Err = false, err
	}
	switch {
	case w.leader && failed:
		w.control.Fail()
	case w.leader && w.path == pathINA:
		w.lastINA = took
		w.control.Report(took, w.psEst)
	}
	m.Errs = uint32(w.h.checkEr)
	w.h.ctl.send(&m)
	if r != w.round {
		return // a round this worker had finished, recovered for the others
	}
	w.round++
	w.got = 0
	w.begun, w.stopped = false, false
	if w.round < w.iters {
		w.computeRound()
	}
}

// verify compares round r's sum as the worker holds it — the INA path's
// results, the PS path's sums in 32 or 64 bits — with the exact sum; it
// returns what differs, or "".
func (w *worker) verify(r int) string {
	want := w.expected(r)
	narrow, wide := w.res.Buf, w.psres.Buf[4*w.values:]
	if w.path == pathPS {
		narrow = w.psres.Buf
	}
	for i, v := range want {
		var isWide bool
		if w.path == pathPS {
			isWide = w.wideMsg[4*i/w.msgSize]
		} else {
			isWide = w.recovered[i/w.k]
		}
		var got int64
		if isWide {
			got = int64(binary.BigEndian.Uint64(wide[8*i:]))
		} else {
			got = int64(int32(binary.BigEndian.Uint32(narrow[4*i:])))
		}
		if got != v {
			return fmt.Sprintf("value %d of round %d is %d, want %d", i, r, got, v)
		}
	}
	return ""
}

// stop ends the current INA round's INA part early: chunks overflowed
// (errored false), or a connection of the job gave up. The worker tells
// the controller how many results it holds; its INA connection out is
// re-established unless every chunk it sent was acknowledged (which
// leaves both ends in step).
func (w *worker) stop(errored bool) {
	if w.stopped {
		return
	}
	w.stopped, w.stoppedRound = true, w.round
	if !w.sent {
		w.reconnecting = true
		err := w.inaOut.Reconnect(func(c *cm.Conn, err error) {
			if err != nil {
				w.h.fail(fmt.Errorf("job %d: re-establishing the INA connection to %v: %w", w.job, w.succ, err))
				return
			}
			w.reconnecting = false
			w.sqPSN, w.posted = c.QP.Attr().SQPSN, 0
			w.h.reconnects++
			w.recoveryDone()
		})
		if err != nil {
			w.h.fail(fmt.Errorf("job %d: %w", w.job, err))
			return
		}
	}
	w.h.ctl.send(&ctlMsg{Type: msgStopped, Job: w.job, Round: uint32(w.round), Rank: uint32(w.rank), Got: uint32(w.got), Errored: errored})
}

// stopRound handles the controller's stop of round r: a connection of
// the job gave up. A worker that had finished round r (every result in,
// every chunk acknowledged) reports it and recovers with the others.
func (w *worker) stopRound(r int) {
	switch {
	case r == w.round && w.begun && w.path == pathINA:
		w.stop(false)
	case r == w.round-1 && !w.begun && w.path == pathINA:
		w.h.ctl.send(&ctlMsg{Type: msgStopped, Job: w.job, Round: uint32(r), Rank: uint32(w.rank), Got: uint32(w.chunks)})
	default:
		w.h.fail(fmt.Errorf("job %d: stop for round %d in round %d (begun %v, path %d)", w.job, r, w.round, w.begun, w.path))
	}
}

// recover re-aggregates on the PS path the chunks of round r that failed
// on INA: chunk from and every one after it (some worker lacks them),
// and the overflowed ones before it. Every worker computes the same
// chunks: each holds the results, flags included, of those before from.
func (w *worker) recover(r, from int) {
	if !(r == w.round && w.stopped) && !(r == w.round-1 && !w.begun) || w.rec != nil || from > w.chunks {
		w.h.fail(fmt.Errorf("job %d: recover round %d from chunk %d in round %d", w.job, r, from, w.round))
		return
	}
	rec := &recovery{round: r, win: w.psWin * max(1, w.msgSize/(4*w.k))}
	for c := range w.chunks {
		if c >= from || w.flagged[c] {
			rec.chunks = append(rec.chunks, c)
			w.recovered[c] = true
		}
	}
	w.rec = rec
	w.postRecovered()
	w.recoveryDone()
}

// postRecovered posts the recovered chunks the window allows: each a
// WRITE with immediate of the worker's values of the chunk, at its place
// in the server's region.
func (w *worker) postRecovered() {
	rec := w.rec
	for rec.next < len(rec.chunks) && rec.next < rec.acked+rec.win {
		c := rec.chunks[rec.next]
		off := 4 * w.k * c
		wr := roce.SendWR{ID: unitWR | uint64(rec.next), Op: roce.OpWriteImm, Local: w.grad.SGE(w.gradAt(rec.round)+off, 4*w.k),
			Remote: w.ps.Remote.Addr + uint64(4*w.values*w.rank+off), RKey: w.ps.Remote.RKey, Imm: recoverFlag | imm(rec.round, c),
			Signaled: true}
		if err := w.ps.QP.PostSend(wr); err != nil {
			w.h.fail(err)
			return
		}
		rec.next++
	}
}

// recoveryDone ends the recovered round once every recovered chunk's sum
// is in, every chunk sent acknowledged, and the INA connection out is up
// again.
func (w *worker) recoveryDone() {
	rec := w.rec
	if rec == nil || rec.got < len(rec.chunks) || rec.acked < len(rec.chunks) || w.reconnecting {
		return
	}
	w.rec = nil
	w.finishRound(rec.round, true, len(rec.chunks))
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
