package freeina

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// The control protocol between hosts and the controller. Every message is
// one RDMA SEND on the host's control connection (an RC queue pair to the
// controller host), so it arrives once and in order: the protocol needs
// no retransmission of its own. Big-endian, a 12-byte header (type, 3
// reserved bytes, job, round) then the type's fields.
//
//	launch     ctl → worker  rank, n, successor, predecessor, PS, values, k, iterations, compute, jitter, seed, PS-path estimate, leader
//	pslaunch   ctl → PS      n, values, message bytes
//	listening  host → ctl    the host listens for the job's connections
//	connect    ctl → host    every host of the job listens: connect
//	setup      worker → ctl  its INA connection: receiver's QP, region; its send QP's first PSN
//	ready      worker → ctl  round computed; the INA PSN of chunk 0; (leader) wants INA, last INA time
//	go         ctl → worker  round's path and window
//	done       worker → ctl  round all-reduced (verified), or an error; in a recovered round, the chunks recovered
//	finish     ctl → host    the job is over: tear its connections down
//	stopped    worker → ctl  the round's INA part is over, chunks failed on it: results in, whether a connection gave up
//	stop       ctl → worker  a connection of the job gave up: stop the round's INA part
//	recover    ctl → worker  re-aggregate on the PS path from chunk From (and the overflowed chunks before it)
const (
	msgLaunch = iota + 1
	msgPSLaunch
	msgListening
	msgConnect
	msgSetup
	msgReady
	msgGo
	msgDone
	msgFinish
	msgStopped
	msgStop
	msgRecover
	numMsgs
)

// ctlHeader is the bytes before a message's fields.
const ctlHeader = 12

// maxCtl is the largest control message (the receive buffers' size).
const maxCtl = 256

var msgNames = [numMsgs]string{"", "launch", "pslaunch", "listening", "connect", "setup", "ready", "go", "done", "finish",
	"stopped", "stop", "recover"}

// ctlMsg is one control message; the fields a type does not use are zero.
type ctlMsg struct {
	Type  uint8
	Job   uint32
	Round uint32

	// launch
	Rank, N        uint32
	Succ, Pred, PS netip.Addr
	Values, K      uint32
	Iterations     uint32
	Compute        time.Duration
	Jitter         float64 // launch
	Seed           uint64
	PSEstimate     time.Duration
	Leader         bool
	Message        uint32        // launch, pslaunch: bytes per PS-path message
	PSWindow       uint32        // launch: PS-path messages a worker keeps in flight
	QPN, RKey      uint32        // setup
	VA             uint64        // setup
	PSN            uint32        // setup: the send QP's first PSN; ready: chunk 0's
	Wants          bool          // ready (leader): ask for memory
	Took           time.Duration // ready (leader): the last INA all-reduce's time; done: this one's
	Path, Window   uint32        // go: 0 INA, 1 PS; window in chunks
	PredPSN        uint32        // go: the predecessor's PSN of chunk 0 (for the wire check)
	OK             bool          // done
	Err            string        // done: what went wrong
	Errs           uint32        // done: RC-check violations seen at this host
	Recovered      uint32        // done: chunks re-aggregated on the PS path (sent only when not 0)
	Got            uint32        // stopped: INA results in, in order
	Errored        bool          // stopped: the worker's INA connection gave up
	From           uint32        // recover: the first chunk of the remainder
}

func (m *ctlMsg) String() string {
	name := "?"
	if int(m.Type) < len(msgNames) {
		name = msgNames[m.Type]
	}
	return fmt.Sprintf("%s job %d round %d", name, m.Job, m.Round)
}

func putAddr(b []byte, a netip.Addr) []byte {
	if !a.Is4() {
		return append(b, 0, 0, 0, 0)
	}
	x := a.As4()
	return append(b, x[:]...)
}

func putBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

// encode appends the message to b.
func (m *ctlMsg) encode(b []byte) []byte {
	b = append(b, m.Type, 0, 0, 0)
	b = binary.BigEndian.AppendUint32(b, m.Job)
	b = binary.BigEndian.AppendUint32(b, m.Round)
	u32 := func(v uint32) { b = binary.BigEndian.AppendUint32(b, v) }
	u64 := func(v uint64) { b = binary.BigEndian.AppendUint64(b, v) }
	switch m.Type {
	case msgLaunch:
		u32(m.Rank)
		u32(m.N)
		b = putAddr(b, m.Succ)
		b = putAddr(b, m.Pred)
		b = putAddr(b, m.PS)
		u32(m.Values)
		u32(m.K)
		u32(m.Iterations)
		u64(uint64(m.Compute))
		u64(uint64(int64(m.Jitter * 1e9)))
		u64(m.Seed)
		u64(uint64(m.PSEstimate))
		u32(m.Message)
		u32(m.PSWindow)
		b = putBool(b, m.Leader)
	case msgPSLaunch:
		u32(m.N)
		u32(m.Values)
		u32(m.Message)
	case msgSetup:
		u32(m.Rank)
		u32(m.QPN)
		u32(m.RKey)
		u64(m.VA)
		u32(m.PSN)
	case msgReady:
		u32(m.Rank)
		u32(m.PSN)
		b = putBool(b, m.Wants)
		u64(uint64(m.Took))
	case msgGo:
		u32(m.Path)
		u32(m.Window)
		u32(m.PredPSN)
	case msgDone:
		u32(m.Rank)
		b = putBool(b, m.OK)
		u32(m.Errs)
		u64(uint64(m.Took))
		e := m.Err
		if len(e) > 160 {
			e = e[:160]
		}
		b = append(b, byte(len(e)))
		b = append(b, e...)
		if m.Recovered != 0 {
			u32(m.Recovered)
		}
	case msgStopped:
		u32(m.Rank)
		u32(m.Got)
		b = putBool(b, m.Errored)
	case msgRecover:
		u32(m.From)
	}
	return b
}

var errShortCtl = errors.New("control message too short")

// decodeCtl parses a control message; it never panics.
func decodeCtl(b []byte) (ctlMsg, error) {
	var m ctlMsg
	if len(b) < ctlHeader {
		return m, errShortCtl
	}
	m.Type = b[0]
	if m.Type == 0 || m.Type >= numMsgs || b[1]|b[2]|b[3] != 0 {
		return m, fmt.Errorf("control message type %d (reserved %x)", b[0], b[1:4])
	}
	m.Job = binary.BigEndian.Uint32(b[4:])
	m.Round = binary.BigEndian.Uint32(b[8:])
	r := b[ctlHeader:]
	short := false
	u32 := func() uint32 {
		if len(r) < 4 {
			short = true
			return 0
		}
		v := binary.BigEndian.Uint32(r)
		r = r[4:]
		return v
	}
	u64 := func() uint64 {
		if len(r) < 8 {
			short = true
			return 0
		}
		v := binary.BigEndian.Uint64(r)
		r = r[8:]
		return v
	}
	addr := func() netip.Addr {
		if len(r) < 4 {
			short = true
			return netip.Addr{}
		}
		a := netip.AddrFrom4([4]byte(r[:4]))
		r = r[4:]
		return a
	}
	flag := func() bool {
		if len(r) < 1 {
			short = true
			return false
		}
		v := r[0] != 0
		r = r[1:]
		return v
	}
	switch m.Type {
	case msgLaunch:
		m.Rank, m.N = u32(), u32()
		m.Succ, m.Pred, m.PS = addr(), addr(), addr()
		m.Values, m.K, m.Iterations = u32(), u32(), u32()
		m.Compute = time.Duration(u64())
		m.Jitter = float64(int64(u64())) / 1e9
		m.Seed = u64()
		m.PSEstimate = time.Duration(u64())
		m.Message = u32()
		m.PSWindow = u32()
		m.Leader = flag()
	case msgPSLaunch:
		m.N, m.Values, m.Message = u32(), u32(), u32()
	case msgSetup:
		m.Rank, m.QPN, m.RKey = u32(), u32(), u32()
		m.VA = u64()
		m.PSN = u32()
	case msgReady:
		m.Rank, m.PSN = u32(), u32()
		m.Wants = flag()
		m.Took = time.Duration(u64())
	case msgGo:
		m.Path, m.Window, m.PredPSN = u32(), u32(), u32()
	case msgDone:
		m.Rank = u32()
		m.OK = flag()
		m.Errs = u32()
		m.Took = time.Duration(u64())
		if len(r) < 1 {
			short = true
			break
		}
		n := int(r[0])
		r = r[1:]
		if len(r) < n {
			short = true
			break
		}
		m.Err = string(r[:n])
		r = r[n:]
		if len(r) == 4 {
			m.Recovered = u32()
		}
	case msgStopped:
		m.Rank, m.Got = u32(), u32()
		m.Errored = flag()
	case msgRecover:
		m.From = u32()
	}
	if short {
		return m, fmt.Errorf("%v: %w", &m, errShortCtl)
	}
	if len(r) != 0 {
		return m, fmt.Errorf("%v: %d bytes after the fields", &m, len(r))
	}
	return m, nil
}
