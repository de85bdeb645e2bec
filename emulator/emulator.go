// Package emulator holds the contracts shared by tracebed's substrates.
//
// Code under study is written once against these interfaces and runs
// unchanged on the deterministic simulation (package emulator/sim) and on real
// network namespaces (package emulator/netns):
//
//   - host agents are sans-IO state machines driven through an Env;
//   - switch data planes implement Pipeline, one frame in, zero or more out.
//
// Neither side ever touches a socket or a clock directly.
//
// # Calls that take time
//
// An agent that needs a round trip outside the network it studies — a
// controller writing a switch's tables through P4Runtime, reading its
// registers — never makes it inside a callback: on netns that would be a
// gRPC round trip during which the agent's timers and datagrams wait. It
// hands the call to its substrate instead (Caller, which every
// substrate's Env implements), and the completion comes back later as an
// event of its own, like a timer or a datagram: on sim after a modelled
// latency, deterministically; on netns when the round trip is over, within
// CallTimeout. The agent's state is touched only by its callbacks, before
// the call and in its completion; the call itself touches only what it
// was given (package emulator/p4rt's Port is the P4Runtime side).
//
// # Who owns a frame
//
// Frames and payloads are lent, never shared, so that a substrate can move
// them through buffers it reuses and a packet costs no allocation:
//
//   - Env.Send copies the payload: the agent keeps its buffer.
//   - Agent.Recv borrows the payload: it is valid until Recv returns, and
//     the substrate then reuses its buffer for a later datagram. An agent
//     that keeps a payload, or any part of it, past Recv copies it.
//   - Pipeline.Process borrows the frame it is given: the pipeline may
//     rewrite it and emit it, which hands it back to the substrate, or drop
//     it, which the substrate notices (the buffer is recycled once Process
//     returns); it never keeps it.
//   - Emitter.Emit takes the frame: the pipeline must not touch it again.
//     A pipeline that needs a new frame (a multicast copy) takes its buffer
//     from NewFrame, which asks the substrate's pool when it has one.
package emulator

import (
	"context"
	"math/rand/v2"
	"net/netip"
	"time"
)

// Addr is a UDP endpoint: a host's IPv4 address and a port.
type Addr = netip.AddrPort

// Env is everything an agent may use of the world. All of an agent's
// callbacks (Start, Recv and timer functions) run on one goroutine, one at a
// time, so agents need no locks.
type Env interface {
	// Now returns the time since the start of the run: virtual time on sim,
	// wall-clock time on netns.
	Now() time.Duration
	// Local returns the address the agent is bound to.
	Local() Addr
	// Send sends one datagram. Delivery is best effort: the datagram may be
	// lost, duplicated or reordered by the network. Send copies payload; the
	// caller may reuse it once Send returns.
	Send(to Addr, payload []byte)
	// After calls f on the agent's goroutine once d has elapsed, unless the
	// returned Timer is stopped first. A non-positive d fires as soon as
	// possible, after the current callback returns.
	After(d time.Duration, f func()) Timer
	// Rand returns the agent's own random source, seeded from the run's
	// seed and the agent's address, so runs are reproducible.
	Rand() *rand.Rand
}

// Poster is implemented by the Env of every substrate: Post runs f on the
// agent's goroutine, after the callback in progress, as if it were a timer
// of zero delay set from there — but Post, unlike the rest of Env, may be
// called from any goroutine, in particular from another agent's callback.
// It is how agents bound to several ports of one host (an RDMA device on
// UDP 4791 and its connection manager on another port, say) hand work to
// each other without locks: on sim every agent shares one goroutine, on
// netns each has its own. Post reports false, dropping f, once the agent
// has stopped.
type Poster interface {
	Post(f func()) bool
}

// ChecksumOmitter is implemented by the Env of every substrate.
// OmitUDPChecksum makes the agent's datagrams leave with a UDP checksum
// of 0, "no checksum", which IPv4 allows (RFC 768), and saves a pass over
// every payload at both ends: receivers do not check a checksum that is
// absent. It is for protocols that carry an end-to-end check of their
// own; RoCEv2 devices send 0 (rdma_rxe's prepare_udp_hdr, RNICs) and
// protect each packet with its invariant CRC. Call it from Start, before
// the agent's first Send.
type ChecksumOmitter interface {
	OmitUDPChecksum()
}

// GatherSender is implemented by the Env of every substrate. SendGather
// sends one datagram whose payload is head, body and tail joined, as
// Send(to, head+body+tail) would, without joining them first (the iovec
// of sendmsg): an agent that frames a large body it keeps elsewhere (an
// RDMA device's memory region, a server's stored page) copies it once,
// into the frame. Like Send, it copies all three.
type GatherSender interface {
	SendGather(to Addr, head, body, tail []byte)
}

// SendParts sends head, body and tail as one datagram through env: with
// SendGather where env is a GatherSender, else joined in *scratch (a
// buffer the caller keeps for the purpose) and sent with Send.
func SendParts(env Env, to Addr, head, body, tail []byte, scratch *[]byte) {
	if g, ok := env.(GatherSender); ok {
		g.SendGather(to, head, body, tail)
		return
	}
	*scratch = append(append(append((*scratch)[:0], head...), body...), tail...)
	env.Send(to, *scratch)
}

// Caller is implemented by the Env of every substrate: it is how an agent
// makes a call that blocks — a control-plane round trip to a switch — and
// stays sans-IO. Call hands op to the substrate and returns at once; op
// runs outside the agent's callbacks, and done(op's error) then runs on
// the agent's goroutine as an event of its own, never inside Call:
//
//   - on sim, op and done run together, on the simulation's goroutine, a
//     modelled control latency after the call (sim.Options.ControlLatency;
//     0: at the same instant, after the events already due), so a run
//     stays a pure function of its inputs and seed;
//   - on netns, op runs on a goroutine of the agent's own, with a context
//     that ends after CallTimeout (or when the run closes), and done is
//     posted to the agent's loop when op returns.
//
// An agent's calls run one at a time, in the order they were made, so a
// call may rely on every earlier one having completed (a write after the
// read it was planned from, a binding's removal after its installation).
// op must not touch the agent's state, which its callbacks keep touching
// meanwhile: it uses only what it captured, and leaves its results where
// done reads them. Call, like After, is called from the agent's callbacks;
// once the agent has stopped, done is dropped.
type Caller interface {
	Call(op func(ctx context.Context) error, done func(err error))
}

// CallTimeout bounds one Caller call on a substrate where calls take real
// time (netns): a switch that stopped answering fails the call, and the
// agent's run, with an error instead of stalling it.
const CallTimeout = 10 * time.Second

// Timer is a pending call scheduled with Env.After.
type Timer interface {
	// Stop cancels the call. It reports whether the call was still pending.
	Stop() bool
}

// Agent is a host program under study.
type Agent interface {
	// Start is called once, before any Recv, with the agent's environment.
	Start(env Env)
	// Recv is called for every datagram addressed to the agent. payload
	// is lent: it is valid until Recv returns, after which the substrate
	// reuses its buffer. An agent that keeps payload, or a part of it,
	// copies it.
	Recv(from Addr, payload []byte)
}

// Pipeline is a switch data plane. Frames are whole Ethernet frames; ports are
// numbered from 1 in the order a switch's links appear in the topology.
type Pipeline interface {
	// Process handles one frame that arrived on port in at time now. It may
	// modify frame and emit it; it emits any number of frames through out.
	// The pipeline must not keep or touch a slice after emitting it, and must
	// not keep frame after returning: a frame it did not emit goes back to
	// the substrate's pool then. Process never panics on malformed input:
	// it drops the frame and counts the drop.
	Process(now time.Duration, in int, frame []byte, out Emitter)
}

// CPUPort is the port number of the switch's control plane. A frame a
// Pipeline emits to CPUPort goes to the controller (a P4Runtime packet-in,
// where the substrate has a controller channel: the Go switch; sim counts
// it as sent to a missing port), and a controller's packet-out arrives as a
// frame on CPUPort. 510 is the CPU port tracebed starts bmv2 with
// (simple_switch_grpc --cpu-port 510), so a P4 program and its Go twin use
// the same number; 511 is v1model's drop port.
const CPUPort = 510

// Emitter receives the frames a Pipeline sends.
type Emitter interface {
	// Emit queues frame on egress port with priority prio; 0 is the lowest
	// priority, and a value at or above the port's number of queues uses
	// the highest queue. Emit takes ownership of frame.
	Emit(port int, prio int, frame []byte)
}

// FramePool is implemented by the Emitters of substrates that recycle
// frame buffers (sim does). Pipelines reach it through NewFrame.
type FramePool interface {
	// NewFrame returns an empty buffer with room for n bytes. Emitting it
	// gives it back to the substrate; a buffer that is never emitted is
	// left to the garbage collector.
	NewFrame(n int) []byte
}

// NewFrame returns an empty buffer with room for an n-byte frame that a
// pipeline will emit through out: from the substrate's pool when out is a
// FramePool, else newly allocated.
func NewFrame(out Emitter, n int) []byte {
	if p, ok := out.(FramePool); ok {
		return p.NewFrame(n)
	}
	return make([]byte, 0, n)
}

// AgentFunc adapts plain functions to Agent, for tests and small tools.
type AgentFunc struct {
	OnStart func(env Env)
	OnRecv  func(from Addr, payload []byte)
}

// Start implements Agent.
func (a AgentFunc) Start(env Env) {
	if a.OnStart != nil {
		a.OnStart(env)
	}
}

// Recv implements Agent.
func (a AgentFunc) Recv(from Addr, payload []byte) {
	if a.OnRecv != nil {
		a.OnRecv(from, payload)
	}
}
