package roce

import (
	"fmt"
	"math/bits"
	"net/netip"
	"strings"
	"time"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/roce/wire"
)

// QPState is the state of a queue pair (IBTA 10.3.1).
type QPState uint8

// QP states. SQD (send queue drain) and SQE (send queue error) are states
// of the specification that tracebed does not implement: SQE belongs to
// UC and UD QPs, and an RC QP with a failed request goes to ERR; draining
// is not offered (docs/roce.md).
const (
	StateReset QPState = iota
	StateInit
	StateRTR
	StateRTS
	StateSQD
	StateSQE
	StateErr
)

var stateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

func (s QPState) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// QPAttr are the attributes of a QP (ibv_qp_attr, the RC part).
type QPAttr struct {
	State  QPState
	PKey   uint16 // partition key (P_Key); tracebed has one partition per value, no table
	Access Access // what peers may do: AccessRemoteWrite, AccessRemoteRead

	PathMTU         int        // 256…4096, at most the device's MTU
	DestQPN         uint32     // the peer's QP number
	Remote          netip.Addr // the peer's IPv4 address (the address vector)
	RQPSN           uint32     // the first PSN expected from the peer
	MaxDestRdAtomic int        // responder resources: READs remembered for re-execution
	MinRNRTimer     uint8      // the RNR NAK timer code this responder sends (wire.RNRTimer)

	SQPSN       uint32 // the first PSN this requester sends
	Timeout     uint8  // local ACK timeout, 4.096 µs × 2^Timeout; 0 disables it
	RetryCnt    uint8  // retries after a timeout or a sequence-error NAK, 0–7
	RNRRetry    uint8  // retries after an RNR NAK, 0–7; 7 means without limit
	MaxRdAtomic int    // initiator depth: READs outstanding at once
}

// AttrMask says which attributes a Modify sets (ibv_qp_attr_mask).
type AttrMask uint32

// Attribute mask bits.
const (
	AttrState AttrMask = 1 << iota
	AttrPKey
	AttrAccess
	AttrPathMTU
	AttrDestQPN
	AttrRemote
	AttrRQPSN
	AttrMaxDestRdAtomic
	AttrMinRNRTimer
	AttrSQPSN
	AttrTimeout
	AttrRetryCnt
	AttrRNRRetry
	AttrMaxRdAtomic
)

var attrNames = [...]string{"state", "pkey", "access", "path_mtu", "dest_qpn", "remote", "rq_psn",
	"max_dest_rd_atomic", "min_rnr_timer", "sq_psn", "timeout", "retry_cnt", "rnr_retry", "max_rd_atomic"}

func (m AttrMask) String() string {
	var s []string
	for i, n := range attrNames {
		if m&(1<<i) != 0 {
			s = append(s, n)
		}
	}
	return strings.Join(s, ",")
}

// The attributes each RC transition requires and allows besides the state
// (IBTA table 97; the verbs man page of ibv_modify_qp).
var transitions = map[[2]QPState]struct{ required, optional AttrMask }{
	{StateReset, StateInit}: {AttrPKey | AttrAccess, 0},
	{StateInit, StateInit}:  {0, AttrPKey | AttrAccess},
	{StateInit, StateRTR}: {AttrPathMTU | AttrDestQPN | AttrRemote | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer,
		AttrPKey | AttrAccess},
	{StateRTR, StateRTS}: {AttrSQPSN | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxRdAtomic,
		AttrAccess | AttrMinRNRTimer},
	{StateRTS, StateRTS}: {0, AttrAccess | AttrMinRNRTimer | AttrTimeout | AttrRetryCnt | AttrRNRRetry},
}

// QPConfig configures a new QP (ibv_qp_init_attr).
type QPConfig struct {
	SendCQ, RecvCQ *CQ
	MaxSendWR      int  // send queue depth (default 256)
	MaxRecvWR      int  // receive queue depth (default 256)
	SignalAll      bool // every send request completes, signaled or not
}

// QP is a reliable-connection queue pair.
type QP struct {
	dev    *Device
	qpn    uint32
	attr   QPAttr
	cfg    QPConfig
	closed bool

	sq  sendQueue
	rq  recvQueue
	res responder

	// The ICRC seed of its packets (from the device's address, fixed once
	// it started) to txTo.
	txTo  netip.AddrPort
	txCRC wire.PseudoCRC

	timer    emulator.Timer // the local ACK timer, when armed
	deadline time.Duration  // when the ACK timer expires; it is pushed back lazily
	onTimer  func()
}

// CreateQP creates an RC queue pair in the RESET state (ibv_create_qp).
func (d *Device) CreateQP(cfg QPConfig) (*QP, error) {
	if cfg.MaxSendWR == 0 {
		cfg.MaxSendWR = 256
	}
	if cfg.MaxRecvWR == 0 {
		cfg.MaxRecvWR = 256
	}
	if cfg.MaxSendWR < 1 || cfg.MaxRecvWR < 1 || cfg.MaxSendWR > 1<<20 || cfg.MaxRecvWR > 1<<20 {
		return nil, fmt.Errorf("%w: queue depths %d and %d; want 1 to %d", ErrInvalid, cfg.MaxSendWR, cfg.MaxRecvWR, 1<<20)
	}
	if FirstQPN+len(d.qps) > wire.PSNMask {
		return nil, fmt.Errorf("%w: out of QP numbers", ErrInvalid)
	}
	qp := &QP{dev: d, qpn: uint32(FirstQPN + len(d.qps)), cfg: cfg}
	// The rings are a power of two long, so that a count wraps to an
	// index with a mask; the queue depths are the configured ones.
	qp.sq.ring = make([]swqe, 1<<bits.Len(uint(cfg.MaxSendWR-1)))
	qp.rq.ring = make([]rwqe, 1<<bits.Len(uint(cfg.MaxRecvWR-1)))
	qp.onTimer = qp.timerFired
	qp.attr.PKey = wire.DefaultPKey
	d.qps = append(d.qps, qp)
	return qp, nil
}

// QPN returns the QP's number.
func (qp *QP) QPN() uint32 { return qp.qpn }

// State returns the QP's state.
func (qp *QP) State() QPState { return qp.attr.State }

// Attr returns the QP's attributes.
func (qp *QP) Attr() QPAttr { return qp.attr }

// Device returns the QP's device.
func (qp *QP) Device() *Device { return qp.dev }

// Destroy removes the QP (ibv_destroy_qp): its number stops receiving and
// its work requests are dropped without completions.
func (qp *QP) Destroy() {
	qp.reset()
	qp.closed = true
	qp.dev.qps[qp.qpn-FirstQPN] = nil
}

// Modify changes the QP's attributes and state (ibv_modify_qp). Every
// transition checks that the attributes it requires are in mask and that
// no others are; any state may go to RESET or ERR.
func (qp *QP) Modify(a QPAttr, mask AttrMask) error {
	if qp.closed {
		return fmt.Errorf("%w: QP %d destroyed", ErrState, qp.qpn)
	}
	qp.dev.enter()
	defer qp.dev.leave()
	from, to := qp.attr.State, qp.attr.State
	if mask&AttrState != 0 {
		to = a.State
	}
	switch {
	case to == StateReset:
		qp.reset()
		return nil
	case to == StateErr:
		qp.toErr()
		return nil
	case to == StateSQD || to == StateSQE:
		return fmt.Errorf("%w: state %v", ErrUnsupported, to)
	}
	t, ok := transitions[[2]QPState{from, to}]
	if !ok {
		return fmt.Errorf("%w: no transition %v → %v", ErrState, from, to)
	}
	given := mask &^ AttrState
	if missing := t.required &^ given; missing != 0 {
		return fmt.Errorf("%w: %v → %v needs %v", ErrInvalid, from, to, missing)
	}
	if extra := given &^ (t.required | t.optional); extra != 0 {
		return fmt.Errorf("%w: %v → %v does not take %v", ErrInvalid, from, to, extra)
	}
	if given&AttrPathMTU != 0 && (!wire.ValidMTU(a.PathMTU) || a.PathMTU > qp.dev.cfg.MTU) {
		return fmt.Errorf("%w: path MTU %d; want one of %v up to the device's %d", ErrInvalid, a.PathMTU, wire.MTUs, qp.dev.cfg.MTU)
	}
	if given&AttrRemote != 0 && !a.Remote.Unmap().Is4() {
		return fmt.Errorf("%w: remote address %v is not IPv4", ErrInvalid, a.Remote)
	}
	if given&AttrDestQPN != 0 && a.DestQPN > wire.PSNMask {
		return fmt.Errorf("%w: destination QPN %#x has more than 24 bits", ErrInvalid, a.DestQPN)
	}
	if given&(AttrRQPSN|AttrSQPSN) != 0 && (a.RQPSN > wire.PSNMask || a.SQPSN > wire.PSNMask) {
		return fmt.Errorf("%w: PSNs have 24 bits", ErrInvalid)
	}
	if given&(AttrRetryCnt|AttrRNRRetry) != 0 && (a.RetryCnt > 7 || a.RNRRetry > 7) {
		return fmt.Errorf("%w: retry counts are 3 bits (0–7)", ErrInvalid)
	}
	if given&(AttrTimeout|AttrMinRNRTimer) != 0 && (a.Timeout > 31 || a.MinRNRTimer > 31) {
		return fmt.Errorf("%w: timeout and min_rnr_timer are 5 bits (0–31)", ErrInvalid)
	}
	if given&(AttrMaxRdAtomic|AttrMaxDestRdAtomic) != 0 && (a.MaxRdAtomic < 0 || a.MaxRdAtomic > 255 || a.MaxDestRdAtomic < 0 || a.MaxDestRdAtomic > 255) {
		return fmt.Errorf("%w: max_rd_atomic and max_dest_rd_atomic are 0 to 255", ErrInvalid)
	}
	if given&AttrAccess != 0 && a.Access&^(AccessRemoteWrite|AccessRemoteRead|AccessLocalWrite) != 0 {
		return fmt.Errorf("%w: access %v", ErrInvalid, a.Access)
	}
	set := func(m AttrMask, f func()) {
		if given&m != 0 {
			f()
		}
	}
	set(AttrPKey, func() { qp.attr.PKey = a.PKey })
	set(AttrAccess, func() { qp.attr.Access = a.Access })
	set(AttrPathMTU, func() { qp.attr.PathMTU = a.PathMTU })
	set(AttrDestQPN, func() { qp.attr.DestQPN = a.DestQPN })
	set(AttrRemote, func() { qp.attr.Remote = a.Remote.Unmap() })
	set(AttrRQPSN, func() { qp.attr.RQPSN = a.RQPSN })
	set(AttrMaxDestRdAtomic, func() { qp.attr.MaxDestRdAtomic = a.MaxDestRdAtomic })
	set(AttrMinRNRTimer, func() { qp.attr.MinRNRTimer = a.MinRNRTimer })
	set(AttrSQPSN, func() { qp.attr.SQPSN = a.SQPSN })
	set(AttrTimeout, func() { qp.attr.Timeout = a.Timeout })
	set(AttrRetryCnt, func() { qp.attr.RetryCnt = a.RetryCnt })
	set(AttrRNRRetry, func() { qp.attr.RNRRetry = a.RNRRetry })
	set(AttrMaxRdAtomic, func() { qp.attr.MaxRdAtomic = a.MaxRdAtomic })
	qp.attr.State = to
	switch {
	case from == StateInit && to == StateRTR:
		qp.res.start(qp.attr.RQPSN, qp.attr.MaxDestRdAtomic)
	case from == StateRTR && to == StateRTS:
		qp.sq.start(qp.attr.SQPSN, qp.attr.RetryCnt, qp.attr.RNRRetry)
		qp.pump()
	case from == StateRTS && to == StateRTS:
		set(AttrRetryCnt|AttrRNRRetry, func() { qp.sq.retryLeft, qp.sq.rnrLeft = qp.attr.RetryCnt, qp.attr.RNRRetry })
	}
	return nil
}

// reset empties the QP's queues without completions and returns it to
// RESET with its attributes cleared (IBTA: transition to Reset).
func (qp *QP) reset() {
	qp.stopTimer()
	qp.sq.rnrTimer = stop(qp.sq.rnrTimer)
	qp.sq.clear()
	qp.rq.clear()
	qp.res = responder{}
	qp.attr = QPAttr{PKey: wire.DefaultPKey}
}

// toErr moves the QP to ERR: every outstanding work request completes
// with StatusWRFlushErr, send queue first, and nothing more is sent or
// accepted.
func (qp *QP) toErr() {
	if qp.attr.State == StateErr {
		return
	}
	qp.attr.State = StateErr
	qp.stopTimer()
	qp.sq.rnrTimer = stop(qp.sq.rnrTimer)
	for qp.sq.head != qp.sq.tail {
		w := qp.sq.at(qp.sq.head)
		qp.dev.complete(qp.cfg.SendCQ, Completion{WRID: w.wr.ID, Status: StatusWRFlushErr, Opcode: w.wcOpcode(), QPN: qp.qpn})
		qp.sq.head++
	}
	qp.sq.clear()
	if r := qp.res.cur.recv; r != nil {
		qp.dev.complete(qp.cfg.RecvCQ, Completion{WRID: r.ID, Status: StatusWRFlushErr, Opcode: WCRecv, QPN: qp.qpn})
		qp.res.cur.recv = nil
	}
	for qp.rq.head != qp.rq.tail {
		r := qp.rq.pop()
		qp.dev.complete(qp.cfg.RecvCQ, Completion{WRID: r.ID, Status: StatusWRFlushErr, Opcode: WCRecv, QPN: qp.qpn})
	}
}

func stop(t emulator.Timer) emulator.Timer {
	if t != nil {
		t.Stop()
	}
	return nil
}

// fail completes the oldest send request with status and moves the QP to
// ERR (which flushes the rest).
func (qp *QP) fail(status Status) {
	if qp.sq.head != qp.sq.tail {
		w := qp.sq.at(qp.sq.head)
		qp.dev.complete(qp.cfg.SendCQ, Completion{WRID: w.wr.ID, Status: status, Opcode: w.wcOpcode(), QPN: qp.qpn})
		qp.sq.head++
	}
	qp.toErr()
}

// PostSend posts a send work request (ibv_post_send). It fails at once
// for a malformed request, a full send queue or a QP in RESET, INIT or
// RTR; in ERR the request completes with StatusWRFlushErr. Local
// protection (the key, bounds and rights of wr.Local) is checked when the
// request is executed, as RNICs do: a bad one completes with
// StatusLocProtErr and moves the QP to ERR.
func (qp *QP) PostSend(wr SendWR) error {
	if qp.closed {
		return fmt.Errorf("%w: QP %d destroyed", ErrState, qp.qpn)
	}
	if wr.Op > OpRead {
		return fmt.Errorf("%w: opcode %v", ErrInvalid, wr.Op)
	}
	if wr.Local.Length > MaxMessage {
		return fmt.Errorf("%w: message of %d bytes (at most 2^31)", ErrInvalid, wr.Local.Length)
	}
	switch qp.attr.State {
	case StateRTS:
	case StateErr:
		qp.dev.enter()
		w := swqe{wr: wr}
		qp.dev.complete(qp.cfg.SendCQ, Completion{WRID: wr.ID, Status: StatusWRFlushErr, Opcode: w.wcOpcode(), QPN: qp.qpn})
		qp.dev.leave()
		return nil
	default:
		return fmt.Errorf("%w: post send in %v", ErrState, qp.attr.State)
	}
	if qp.sq.tail-qp.sq.head >= uint64(qp.cfg.MaxSendWR) {
		return fmt.Errorf("%w: %d send requests outstanding", ErrQueueFull, qp.cfg.MaxSendWR)
	}
	qp.dev.enter()
	defer qp.dev.leave()
	qp.sq.push(qp, wr)
	qp.pump()
	return nil
}

// PostRecv posts a receive work request (ibv_post_recv). Unlike RNICs, it
// checks the buffer at once: a key that is not a region of this device
// with local write access, or bounds outside it, fail the call.
func (qp *QP) PostRecv(wr RecvWR) error {
	if qp.closed {
		return fmt.Errorf("%w: QP %d destroyed", ErrState, qp.qpn)
	}
	if qp.attr.State == StateReset {
		return fmt.Errorf("%w: post receive in RESET", ErrState)
	}
	if qp.attr.State == StateErr {
		qp.dev.enter()
		qp.dev.complete(qp.cfg.RecvCQ, Completion{WRID: wr.ID, Status: StatusWRFlushErr, Opcode: WCRecv, QPN: qp.qpn})
		qp.dev.leave()
		return nil
	}
	mr := qp.dev.mr(wr.Local.LKey)
	if mr == nil || mr.Access&AccessLocalWrite == 0 {
		return fmt.Errorf("%w: lkey %#x is not a region with local write access", ErrInvalid, wr.Local.LKey)
	}
	buf, ok := mr.span(wr.Local.Addr, uint64(wr.Local.Length))
	if !ok {
		return fmt.Errorf("%w: %d bytes at %#x are outside region %#x", ErrInvalid, wr.Local.Length, wr.Local.Addr, wr.Local.LKey)
	}
	if qp.rq.tail-qp.rq.head >= uint64(qp.cfg.MaxRecvWR) {
		return fmt.Errorf("%w: %d receive requests outstanding", ErrQueueFull, qp.cfg.MaxRecvWR)
	}
	qp.rq.push(rwqe{RecvWR: wr, mr: mr, buf: buf})
	return nil
}

// RecvQueued returns the receive requests waiting for a message.
func (qp *QP) RecvQueued() int { return int(qp.rq.tail - qp.rq.head) }

// SendQueued returns the send requests not yet completed.
func (qp *QP) SendQueued() int { return int(qp.sq.tail - qp.sq.head) }

// recv handles a packet addressed to this QP that passed the device's
// checks.
func (qp *QP) recv(from netip.Addr, p *wire.Packet) {
	switch qp.attr.State {
	case StateRTR, StateRTS:
	default:
		qp.dev.c.Drop(DropQPState)
		return
	}
	if p.PKey != qp.attr.PKey {
		qp.dev.c.Drop(DropPKey)
		return
	}
	if from != qp.attr.Remote {
		qp.dev.c.Drop(DropSource)
		return
	}
	if p.Opcode.IsRequest() {
		qp.request(p)
		return
	}
	if qp.attr.State != StateRTS {
		qp.dev.c.Drop(DropQPState)
		return
	}
	qp.response(p)
}

// Local ACK timer. It is armed while requests are unacknowledged;
// progress pushes its deadline back without re-arming it, and it re-arms
// itself for the rest when it fires early.

func (qp *QP) armTimer() {
	to := wire.AckTimeout(qp.attr.Timeout)
	if to == 0 {
		return
	}
	qp.deadline = qp.dev.env.Now() + to
	if qp.timer == nil {
		qp.timer = qp.dev.after(to, qp.onTimer)
	}
}

func (qp *QP) stopTimer() { qp.timer = stop(qp.timer) }

func (qp *QP) timerFired() {
	qp.timer = nil
	if qp.attr.State != StateRTS || !qp.sq.outstanding() {
		return
	}
	now := qp.dev.env.Now()
	if now < qp.deadline {
		qp.timer = qp.dev.after(qp.deadline-now, qp.onTimer)
		return
	}
	if qp.sq.rnrWait {
		return // the RNR timer restarts the requester
	}
	qp.dev.c.Timeouts++
	qp.retry(qp.sq.una, true)
}
