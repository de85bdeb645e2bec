package packet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"time"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/p4/ina"
)

// The control protocol of packet-level runs: UDP datagrams between the
// controller and the agents on the hosts (docs/dynaina.md, "Packet
// level"). Every message is retransmitted by its sender until the message
// that answers it arrives, and every receiver is idempotent, so the
// protocol survives the loss, duplication and reordering the links inject.
//
//	controller → node   launch      run worker rank of job (answer: launch-ack)
//	node → controller   ready       computed round r, asks how to all-reduce it (answer: grant)
//	controller → node   grant       all-reduce round r so (ring, pool, shared; switch job id, window)
//	node → controller   done        round r all-reduced (and checked) at time t (answer: done-ack)
//	controller → PS     ps-add      aggregate switch job id for a job (answer: ps-ack); an
//	                                extension (flags, window, pool) follows the workers when flags are set
//	controller → PS     ps-remove   forget switch job id (answer: ps-ack)
//
// Layout (big-endian): magic 0xC7 | type | job (4) | rank (1) | reserved (1) |
// round (4), then the body of the type.
const (
	ctlMagic     = 0xC7
	ctlHeaderLen = 12
	maxErrLen    = 512
)

// msgType is the type of a control message.
type msgType uint8

const (
	msgLaunch msgType = 1 + iota
	msgLaunchAck
	msgReady
	msgGrant
	msgDone
	msgDoneAck
	msgPSAdd
	msgPSRemove
	msgPSAck
	numMsgTypes
)

var msgNames = [...]string{"", "launch", "launch-ack", "ready", "grant", "done", "done-ack", "ps-add", "ps-remove", "ps-ack"}

func (t msgType) String() string {
	if t > 0 && t < numMsgTypes {
		return msgNames[t]
	}
	return fmt.Sprintf("msgType(%d)", uint8(t))
}

// Grant modes.
const (
	grantRing   = 0
	grantPool   = 1
	grantShared = 2
	// grantRemap is shared mode with ATP's slot remapping: the packets
	// name their aggregator (allreduce.StreamConfig.Remap).
	grantRemap = 3
)

// ctlMsg is one control message; which fields are meaningful depends on
// Type.
type ctlMsg struct {
	Type  msgType
	Job   uint32 // trace job id
	Rank  uint8  // worker rank (launch, ready, done, their answers)
	Round uint32 // all-reduce round (ready, grant, done, done-ack)

	// launch
	Launch launchBody
	// grant
	Mode   uint8  // grantRing, grantPool, grantShared, grantRemap
	SwJob  uint16 // switch job id (pool, shared)
	Window uint32 // slots (pool, shared)
	Target emulator.Addr
	// done
	At   time.Duration // the node's clock when the round ended
	Last bool          // the job's last round
	Err  string        // a failed all-reduce or check
	// ps-add, ps-remove, ps-ack
	PS psBody
}

// launchBody starts a worker: everything it needs to train.
type launchBody struct {
	K           uint16
	Iterations  uint32
	Elements    uint32
	Compute     time.Duration // per iteration, before jitter
	Jitter      float64
	Seed        uint64        // the run's seed: compute draws and gradients
	Timeout     time.Duration // INA packets and control messages
	RingTimeout time.Duration
	RingWindow  uint32
	Peers       []emulator.Addr // every worker's node agent, by rank
}

// psBody registers a job with a parameter server.
type psBody struct {
	SwJob    uint16
	Elements uint32
	K        uint16
	Flags    uint8 // psRepublish, psRemap
	// Window and Size are the job's window and shared pool (psRemap).
	Window, Size uint32
	Multicast    emulator.Addr   // the aggregation switch (results go back through it)
	Workers      []emulator.Addr // the workers' node agents, by rank
}

// Flags of ps-add.
const (
	// psRepublish: answer retransmissions of completed chunks through the
	// switch (allreduce.PSJob.Republish; release on return).
	psRepublish = 1
	// psRemap: move collided window slots to free aggregators
	// (allreduce.PSJob.Remap).
	psRemap = 2
)

var errCtlMalformed = errors.New("malformed control message")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errCtlMalformed, fmt.Sprintf(format, args...))
}

// putAddr appends an IPv4 endpoint; an invalid one is all zeros.
func putAddr(b []byte, a emulator.Addr) []byte {
	var ip [4]byte
	if a.Addr().Is4() {
		ip = a.Addr().As4()
	}
	b = append(b, ip[:]...)
	return binary.BigEndian.AppendUint16(b, a.Port())
}

func getAddr(b []byte) emulator.Addr {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[:4])), binary.BigEndian.Uint16(b[4:]))
}

// appendCtl appends the encoding of m to b.
func appendCtl(b []byte, m *ctlMsg) []byte {
	b = append(b, ctlMagic, byte(m.Type))
	b = binary.BigEndian.AppendUint32(b, m.Job)
	b = append(b, m.Rank, 0)
	b = binary.BigEndian.AppendUint32(b, m.Round)
	switch m.Type {
	case msgLaunch:
		l := &m.Launch
		b = binary.BigEndian.AppendUint16(b, l.K)
		b = binary.BigEndian.AppendUint32(b, l.Iterations)
		b = binary.BigEndian.AppendUint32(b, l.Elements)
		b = binary.BigEndian.AppendUint64(b, uint64(l.Compute))
		b = binary.BigEndian.AppendUint64(b, math.Float64bits(l.Jitter))
		b = binary.BigEndian.AppendUint64(b, l.Seed)
		b = binary.BigEndian.AppendUint64(b, uint64(l.Timeout))
		b = binary.BigEndian.AppendUint64(b, uint64(l.RingTimeout))
		b = binary.BigEndian.AppendUint32(b, l.RingWindow)
		b = append(b, byte(len(l.Peers)))
		for _, p := range l.Peers {
			b = putAddr(b, p)
		}
	case msgGrant:
		b = append(b, m.Mode)
		b = binary.BigEndian.AppendUint16(b, m.SwJob)
		b = binary.BigEndian.AppendUint32(b, m.Window)
		b = putAddr(b, m.Target)
	case msgDone:
		b = binary.BigEndian.AppendUint64(b, uint64(m.At))
		var flags byte
		if m.Last {
			flags |= 1
		}
		b = append(b, flags)
		e := m.Err
		if len(e) > maxErrLen {
			e = e[:maxErrLen]
		}
		b = binary.BigEndian.AppendUint16(b, uint16(len(e)))
		b = append(b, e...)
	case msgPSAdd:
		p := &m.PS
		b = binary.BigEndian.AppendUint16(b, p.SwJob)
		b = binary.BigEndian.AppendUint32(b, p.Elements)
		b = binary.BigEndian.AppendUint16(b, p.K)
		b = putAddr(b, p.Multicast)
		b = append(b, byte(len(p.Workers)))
		for _, w := range p.Workers {
			b = putAddr(b, w)
		}
		if p.Flags != 0 { // the extension: flags, window, pool
			b = append(b, p.Flags)
			b = binary.BigEndian.AppendUint32(b, p.Window)
			b = binary.BigEndian.AppendUint32(b, p.Size)
		}
	case msgPSRemove, msgPSAck:
		b = binary.BigEndian.AppendUint16(b, m.PS.SwJob)
	}
	return b
}

// parseCtl decodes a control message. It checks every length and range,
// so whatever it accepts is safe to act on.
func parseCtl(b []byte) (ctlMsg, error) {
	var m ctlMsg
	if len(b) < ctlHeaderLen {
		return m, malformed("%d bytes, want at least %d", len(b), ctlHeaderLen)
	}
	if b[0] != ctlMagic {
		return m, malformed("magic %#x", b[0])
	}
	if b[7] != 0 {
		return m, malformed("reserved byte %#x", b[7])
	}
	m.Type = msgType(b[1])
	m.Job = binary.BigEndian.Uint32(b[2:])
	m.Rank = b[6]
	m.Round = binary.BigEndian.Uint32(b[8:])
	body := b[ctlHeaderLen:]
	need := func(n int) error {
		if len(body) != n {
			return malformed("%s body of %d bytes, want %d", m.Type, len(body), n)
		}
		return nil
	}
	switch m.Type {
	case msgLaunchAck, msgReady, msgDoneAck:
		return m, need(0)
	case msgLaunch:
		const fixed = 2 + 4 + 4 + 8 + 8 + 8 + 8 + 8 + 4 + 1
		if len(body) < fixed {
			return m, malformed("launch body of %d bytes", len(body))
		}
		l := &m.Launch
		l.K = binary.BigEndian.Uint16(body)
		l.Iterations = binary.BigEndian.Uint32(body[2:])
		l.Elements = binary.BigEndian.Uint32(body[6:])
		l.Compute = time.Duration(binary.BigEndian.Uint64(body[10:]))
		l.Jitter = math.Float64frombits(binary.BigEndian.Uint64(body[18:]))
		l.Seed = binary.BigEndian.Uint64(body[26:])
		l.Timeout = time.Duration(binary.BigEndian.Uint64(body[34:]))
		l.RingTimeout = time.Duration(binary.BigEndian.Uint64(body[42:]))
		l.RingWindow = binary.BigEndian.Uint32(body[50:])
		n := int(body[54])
		if err := need(fixed + 6*n); err != nil {
			return m, err
		}
		switch {
		case n < 1 || n > ina.MaxWorkers:
			return m, malformed("launch of %d workers", n)
		case int(m.Rank) >= n:
			return m, malformed("launch of rank %d of %d", m.Rank, n)
		case l.K < 1 || int(l.K) > ina.MaxK:
			return m, malformed("launch with k = %d", l.K)
		case l.Compute < 0 || l.Timeout <= 0 || l.RingTimeout <= 0 || l.RingWindow < 1 || l.RingWindow > 1<<20:
			return m, malformed("launch with compute %v, timeouts %v and %v, ring window %d", l.Compute, l.Timeout, l.RingTimeout, l.RingWindow)
		case !(l.Jitter >= 0 && l.Jitter <= 1):
			return m, malformed("launch with jitter %v", l.Jitter)
		case l.Elements > 1<<28:
			return m, malformed("launch of %d elements", l.Elements)
		}
		for i := range n {
			l.Peers = append(l.Peers, getAddr(body[fixed+6*i:]))
		}
	case msgGrant:
		if err := need(1 + 2 + 4 + 6); err != nil {
			return m, err
		}
		m.Mode = body[0]
		m.SwJob = binary.BigEndian.Uint16(body[1:])
		m.Window = binary.BigEndian.Uint32(body[3:])
		m.Target = getAddr(body[7:])
		switch {
		case m.Mode > grantRemap:
			return m, malformed("grant mode %d", m.Mode)
		case m.Mode != grantRing && (m.Window < 1 || m.Window > 1<<16 || m.SwJob >= ina.MaxJobs):
			return m, malformed("grant of window %d, switch job %d", m.Window, m.SwJob)
		}
	case msgDone:
		if len(body) < 11 {
			return m, malformed("done body of %d bytes", len(body))
		}
		m.At = time.Duration(binary.BigEndian.Uint64(body))
		if body[8]&^1 != 0 {
			return m, malformed("done flags %#x", body[8])
		}
		m.Last = body[8]&1 != 0
		n := int(binary.BigEndian.Uint16(body[9:]))
		if n > maxErrLen {
			return m, malformed("done error of %d bytes", n)
		}
		if err := need(11 + n); err != nil {
			return m, err
		}
		m.Err = string(body[11:])
	case msgPSAdd:
		const fixed = 2 + 4 + 2 + 6 + 1
		const ext = 1 + 4 + 4 // flags, window, pool: present when flags are set
		if len(body) < fixed {
			return m, malformed("ps-add body of %d bytes", len(body))
		}
		p := &m.PS
		p.SwJob = binary.BigEndian.Uint16(body)
		p.Elements = binary.BigEndian.Uint32(body[2:])
		p.K = binary.BigEndian.Uint16(body[6:])
		p.Multicast = getAddr(body[8:])
		n := int(body[14])
		if len(body) == fixed+6*n+ext {
			x := body[fixed+6*n:]
			p.Flags = x[0]
			p.Window = binary.BigEndian.Uint32(x[1:])
			p.Size = binary.BigEndian.Uint32(x[5:])
			if p.Flags == 0 {
				return m, malformed("ps-add extension without flags")
			}
		} else if err := need(fixed + 6*n); err != nil {
			return m, err
		}
		switch {
		case n < 1 || n > ina.MaxWorkers:
			return m, malformed("ps-add of %d workers", n)
		case p.K < 1 || int(p.K) > ina.MaxK || p.SwJob >= ina.MaxJobs || p.Elements > 1<<28:
			return m, malformed("ps-add of switch job %d, k = %d, %d elements", p.SwJob, p.K, p.Elements)
		case p.Flags&^(psRepublish|psRemap) != 0:
			return m, malformed("ps-add flags %#x", p.Flags)
		case p.Flags&psRemap != 0 && (p.Window < 1 || p.Window > 1<<16 || p.Size < 1 || p.Size > 1<<20):
			return m, malformed("ps-add remapping a window of %d slots over %d aggregators", p.Window, p.Size)
		}
		for i := range n {
			p.Workers = append(p.Workers, getAddr(body[fixed+6*i:]))
		}
	case msgPSRemove, msgPSAck:
		if err := need(2); err != nil {
			return m, err
		}
		m.PS.SwJob = binary.BigEndian.Uint16(body)
		if m.PS.SwJob >= ina.MaxJobs {
			return m, malformed("%s of switch job %d", m.Type, m.PS.SwJob)
		}
	default:
		return m, malformed("type %d", b[1])
	}
	return m, nil
}
