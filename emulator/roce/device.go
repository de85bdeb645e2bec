// Package roce is tracebed's soft-RoCE: an RDMA device that speaks RoCEv2
// (package emulator/roce/wire) on UDP port 4791 and runs reliable-connection
// (RC) queue pairs as the InfiniBand Architecture Specification (IBTA)
// Volume 1, chapters 9–11, defines them — the part of rdma_rxe (Linux's
// soft-RoCE driver) and of an RNIC that an application sees through verbs.
//
// A Device is one sans-IO agent (emulator.Agent) bound to UDP 4791 on a
// host, on either substrate. It holds memory regions (MR: keys, bounds,
// access flags), completion queues (CQ: completion events delivered to a
// handler) and queue pairs (QP: the RC state machine, demultiplexed by
// destination QP number). Applications talk verbs to it — RegMR,
// CreateCQ, CreateQP, QP.Modify, QP.PostSend (SEND, SEND with immediate,
// RDMA WRITE, RDMA WRITE with immediate, RDMA READ), QP.PostRecv — from
// the device's goroutine: from Config.OnStart, from completion handlers, or
// from timers set with the device's Env. Connections are set up out of
// band by package emulator/roce/cm, as rdma_cm does.
//
// What is implemented of the specification, what is not (congestion
// control, SRQ, atomics, UD/UC, memory windows) and how it maps to rdma_rxe
// and RNICs is in docs/roce.md.
package roce

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/roce/wire"
)

// Config configures a Device. Zero fields take the defaults.
type Config struct {
	// MTU is the device's active MTU, the largest path MTU of its QPs:
	// 256, 512, 1024, 2048 or 4096 bytes of payload per packet (default
	// 4096).
	MTU int
	// Window is the most PSNs a QP keeps unacknowledged: the sender
	// window of tracebed's requester (default 128 packets). RNICs have no
	// fixed window; they are limited by their own pipelines and, with
	// DCQCN, by congestion control, which tracebed does not implement.
	Window int
	// AckEvery asks for an acknowledgement (the BTH AckReq bit) at least
	// every AckEvery request packets, besides the last packet of every
	// message and the packet that fills the window (default 16, or a
	// quarter of a smaller window, so that ACKs keep the window moving;
	// rdma_rxe uses 64).
	AckEvery int
	// OnStart runs on the device's goroutine when the device starts:
	// the application's entry point.
	OnStart func(d *Device)
}

// Defaults of Config.
const (
	DefaultMTU      = 4096
	DefaultWindow   = 128
	DefaultAckEvery = 16
	// FirstQPN is the first QP number a device gives out (0 and 1 are
	// the special QPs of IBTA; rdma_rxe starts at 17 too).
	FirstQPN = 17
	// MaxMessage is the largest message (IBTA: 2^31 bytes).
	MaxMessage = 1 << 31
)

// Errors of the verbs.
var (
	ErrNotStarted  = errors.New("roce: the device has not started")
	ErrInvalid     = errors.New("roce: invalid argument")
	ErrQueueFull   = errors.New("roce: work queue full")
	ErrState       = errors.New("roce: operation not allowed in the QP's state")
	ErrUnsupported = errors.New("roce: not supported")
)

// Device is an RDMA device: an emulator.Agent for UDP port 4791. Every
// method must be called from the device's goroutine (Config.OnStart, a
// completion handler, a function run by the device's Env), or, on the sim
// substrate, from the simulation's goroutine.
type Device struct {
	cfg   Config
	env   emulator.Env
	local netip.AddrPort

	qps    []*QP // by QPN − FirstQPN
	mrs    []*MR // by key >> 8
	mrFree []int
	nextVA uint64

	// Completions wait here until the callback in progress is done, so
	// that handlers may post work without re-entering a QP mid-update.
	depth    int
	draining bool
	pending  []pendingWC

	buf     []byte // the headers and trailer of the packet being built
	scratch []byte // the packet joined, where the Env cannot gather
	// The ICRC seed of the peer received from last.
	rxFrom netip.AddrPort
	rxCRC  wire.PseudoCRC
	c      Counters
}

type pendingWC struct {
	cq *CQ
	wc Completion
}

// NewDevice returns a device; it starts when attached to a host.
func NewDevice(cfg Config) (*Device, error) {
	if cfg.MTU == 0 {
		cfg.MTU = DefaultMTU
	}
	if !wire.ValidMTU(cfg.MTU) {
		return nil, fmt.Errorf("%w: MTU %d; want one of %v", ErrInvalid, cfg.MTU, wire.MTUs)
	}
	if cfg.Window == 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.Window < 1 || cfg.Window >= 1<<22 {
		return nil, fmt.Errorf("%w: window %d; want 1 to %d packets", ErrInvalid, cfg.Window, 1<<22-1)
	}
	if cfg.AckEvery == 0 {
		cfg.AckEvery = min(DefaultAckEvery, max(1, cfg.Window/4))
	}
	if cfg.AckEvery < 1 {
		return nil, fmt.Errorf("%w: ack_every %d; want at least 1", ErrInvalid, cfg.AckEvery)
	}
	return &Device{cfg: cfg, nextVA: 0x10000, buf: make([]byte, 0, 64)}, nil
}

// Start implements emulator.Agent.
func (d *Device) Start(env emulator.Env) {
	d.env = env
	d.local = env.Local()
	// The ICRC seeds depend on the local address too: start them afresh.
	d.rxFrom = netip.AddrPort{}
	for _, qp := range d.qps {
		if qp != nil {
			qp.txTo = netip.AddrPort{}
		}
	}
	// RoCEv2 packets go with UDP checksum 0, as rdma_rxe and RNICs send
	// them: the ICRC covers what the checksum would.
	if o, ok := env.(emulator.ChecksumOmitter); ok {
		o.OmitUDPChecksum()
	}
	if d.cfg.OnStart != nil {
		d.enter()
		d.cfg.OnStart(d)
		d.leave()
	}
}

// Env returns the device's environment (nil before Start): applications
// use its clock, timers and random source.
func (d *Device) Env() emulator.Env { return d.env }

// Addr returns the device's IPv4 address.
func (d *Device) Addr() netip.Addr { return d.local.Addr() }

// MTU returns the device's active MTU.
func (d *Device) MTU() int { return d.cfg.MTU }

// Counters returns the device's counters.
func (d *Device) Counters() Counters { return d.c }

// enter and leave bracket every entry into the device; the outermost
// leave delivers the completions that piled up.
func (d *Device) enter() { d.depth++ }

func (d *Device) leave() {
	d.depth--
	if d.depth > 0 || d.draining {
		return
	}
	d.draining = true
	for i := 0; i < len(d.pending); i++ {
		p := d.pending[i]
		d.pending[i] = pendingWC{}
		p.cq.deliver(p.wc)
	}
	d.pending = d.pending[:0]
	d.draining = false
}

func (d *Device) complete(cq *CQ, wc Completion) {
	if cq == nil {
		return
	}
	d.pending = append(d.pending, pendingWC{cq, wc})
}

// Recv implements emulator.Agent: one RoCEv2 packet from the network.
func (d *Device) Recv(from emulator.Addr, b []byte) {
	d.enter()
	defer d.leave()
	d.c.RxPackets++
	d.c.RxBytes += uint64(len(b))
	var p wire.Packet
	if err := p.Decode(b); err != nil {
		switch err {
		case wire.ErrShort:
			d.c.Drop(DropShort)
		case wire.ErrVersion:
			d.c.Drop(DropVersion)
		case wire.ErrOpcode:
			d.c.Drop(DropOpcode)
		default:
			d.c.Drop(DropLength)
		}
		return
	}
	if from != d.rxFrom {
		d.rxFrom, d.rxCRC = from, wire.NewPseudoCRC(wire.HostPseudo(from, d.local))
	}
	if !d.rxCRC.Verify(b) {
		d.c.Drop(DropICRC)
		return
	}
	if p.Opcode.IsCNP() {
		d.c.CNPs++ // congestion control is not implemented: counted, ignored
		return
	}
	qp := d.qp(p.DestQP)
	if qp == nil {
		d.c.Drop(DropUnknownQP)
		return
	}
	qp.recv(from.Addr(), &p)
}

// qp returns the QP numbered qpn, or nil.
func (d *Device) qp(qpn uint32) *QP {
	i := int(qpn) - FirstQPN
	if i < 0 || i >= len(d.qps) {
		return nil
	}
	return d.qps[i]
}

// QP returns the QP numbered qpn, or nil.
func (d *Device) QP(qpn uint32) *QP { return d.qp(qpn) }

// send builds and sends one packet of qp.
func (d *Device) send(qp *QP, h *wire.Header, payload []byte) {
	h.PKey = qp.attr.PKey
	h.DestQP = qp.attr.DestQPN
	dst := netip.AddrPortFrom(qp.attr.Remote, wire.Port)
	// Headers, payload and trailer go as parts: the payload is copied
	// once, from the memory region into the frame.
	d.buf = wire.AppendHeader(d.buf[:0], h, len(payload))
	hl := len(d.buf)
	if dst != qp.txTo {
		qp.txTo, qp.txCRC = dst, wire.NewPseudoCRC(wire.HostPseudo(d.local, dst))
	}
	d.buf = qp.txCRC.AppendTrailer(d.buf, d.buf[:hl], payload)
	emulator.SendParts(d.env, dst, d.buf[:hl], payload, d.buf[hl:], &d.scratch)
	d.c.TxPackets++
	d.c.TxBytes += uint64(len(d.buf) + len(payload))
}

// after runs f on the device's goroutine after delay, as an entry point.
func (d *Device) after(delay time.Duration, f func()) emulator.Timer {
	return d.env.After(delay, func() {
		d.enter()
		f()
		d.leave()
	})
}
