// Package cm is the connection manager of tracebed's soft-RoCE: it sets up
// reliable connections between devices (package emulator/roce) out of
// band, as rdma_cm does with IB CM on real RoCE hosts. The active side
// sends a REQ with its QP number, starting PSN, path MTU, READ resources
// and an advertised memory region (address, R_Key, length); the passive
// side, listening on a service id, creates its QP, takes it to RTR and
// answers with a REP carrying its own; the active side takes its QP to
// RTS and confirms with an RTU, on which the passive side goes to RTS. A
// lost message is sent again after Config.Timeout, up to Config.Retries
// times. DREQ/DREP tear a connection down (both QPs go to ERR, which
// flushes outstanding work).
//
// The manager speaks on its own UDP port (Config.Port, 18515 by default:
// the port perftest's ib_write_bw uses for the same exchange), not on
// RoCEv2's 4791; the message format is in msg.go. It runs on the device's
// goroutine — every callback, every QP it touches — and only its socket
// lives on the port's own agent, which hands datagrams over with
// emulator.Poster. Attach puts a device and its manager on a host.
package cm

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/roce"
	"github.com/tracebed/tracebed/emulator/roce/wire"
)

// DefaultPort is the manager's UDP port unless Config.Port says otherwise.
const DefaultPort = 18515

// Config configures a Manager.
type Config struct {
	Port    uint16        // UDP port (default DefaultPort)
	Timeout time.Duration // wait for an answer before sending again (default 20 ms)
	Retries int           // sends of a message after the first (default 8)
}

// Params are one side's parameters of a connection.
type Params struct {
	QP       roce.QPConfig // completion queues and queue depths
	MTU      int           // the largest path MTU wanted; 0: the device's MTU. The smaller side's wins.
	Access   roce.Access   // what the peer may do; 0: remote write and read
	PSN      uint32        // starting PSN, if FixPSN
	FixPSN   bool          // use PSN instead of a random one (from the device's Env.Rand)
	Region   Region        // advertised to the peer
	Private  []byte        // advertised to the peer (at most MaxPrivate bytes)
	Timeout  uint8         // local ACK timeout code (wire.AckTimeout); 0 means 14 (67 ms)
	RetryCnt uint8         // 0–7; 0 means 7
	RNRRetry uint8         // 0–7 (7: no limit); 0 means 7
	MinRNR   uint8         // RNR NAK timer code this side sends; 0 means 12 (0.64 ms)
	// ReadDepth is the RDMA READs this side keeps outstanding, and
	// accepts from its peer (initiator depth and responder resources);
	// 0 means 4.
	ReadDepth int
	// OnReady runs when the QP can receive (RTR), before the peer can
	// send on it: post receive requests here.
	OnReady func(c *Conn)
	// OnDisconnect runs when the peer tears the connection down.
	OnDisconnect func(c *Conn)
}

func (p *Params) defaults(dev *roce.Device) {
	if p.MTU == 0 || p.MTU > dev.MTU() {
		p.MTU = dev.MTU()
	}
	if p.Access == 0 {
		p.Access = roce.AccessRemoteWrite | roce.AccessRemoteRead
	}
	if p.Timeout == 0 {
		p.Timeout = 14
	}
	if p.RetryCnt == 0 {
		p.RetryCnt = 7
	}
	if p.RNRRetry == 0 {
		p.RNRRetry = 7
	}
	if p.MinRNR == 0 {
		p.MinRNR = 12
	}
	if p.ReadDepth == 0 {
		p.ReadDepth = 4
	}
}

// Errors of connections.
var (
	ErrTimeout  = errors.New("cm: no answer from the peer")
	ErrRejected = errors.New("cm: connection rejected")
)

// Conn is a connection: a QP in RTS (once established) and what the peer
// advertised.
type Conn struct {
	QP      *roce.QP
	Peer    netip.Addr
	Service uint64
	Remote  Region // the peer's advertised region
	Private []byte // the peer's private data
	Active  bool   // this side connected (rather than listened)
	// Epoch counts the times the connection was re-established
	// (Reconnect); 0 for the first.
	Epoch int

	m        *Manager
	params   Params
	state    connState
	localID  uint32
	remoteID uint32
	// peerIDs are every communication id the peer used for this
	// connection (passive side: one per REQ of a new epoch), by which
	// late duplicates of its old REQs are recognized.
	peerIDs []uint32
	psn     uint32
	peerRes uint8 // the peer's responder resources
	last    []byte
	tries   int
	timer   emulator.Timer
	done    func(*Conn, error)
	onConn  func(*Conn)
}

type connState uint8

const (
	stConnecting connState = iota // active: REQ sent
	stReady                       // passive: REP sent, waiting for the RTU
	stEstablished
	stClosing // DREQ sent
	stClosed
)

// Established reports whether the connection is up.
func (c *Conn) Established() bool { return c.state == stEstablished }

type passiveKey struct {
	peer netip.Addr
	id   uint32
}

type listener struct {
	params Params
	onConn func(*Conn)
}

// Manager is a host's connection manager. Its methods run on the device's
// goroutine.
type Manager struct {
	dev       *roce.Device
	cfg       Config
	sock      socket
	nextID    uint32
	listeners map[uint64]*listener
	conns     map[uint32]*Conn
	passive   map[passiveKey]*Conn

	// Malformed counts datagrams that did not decode; Stray those for no
	// known connection.
	Malformed, Stray uint64
}

// New returns the connection manager of dev.
func New(dev *roce.Device, cfg Config) *Manager {
	if cfg.Port == 0 {
		cfg.Port = DefaultPort
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 20 * time.Millisecond
	}
	if cfg.Retries <= 0 {
		cfg.Retries = 8
	}
	m := &Manager{dev: dev, cfg: cfg, listeners: map[uint64]*listener{}, conns: map[uint32]*Conn{}, passive: map[passiveKey]*Conn{}}
	m.sock.m = m
	return m
}

// Port returns the manager's UDP port.
func (m *Manager) Port() uint16 { return m.cfg.Port }

// Agent returns the agent to bind to the manager's port on the device's
// host (Attach does it).
func (m *Manager) Agent() emulator.Agent { return &m.sock }

// Attacher is what Attach needs of a testbed.
type Attacher interface {
	Attach(host string, udpPort uint16, agent emulator.Agent) (emulator.Env, error)
}

// Attach brings an RDMA host up: the manager's socket on its port, then
// the device on UDP 4791 (whose Config.OnStart then runs). It returns the
// device's environment (for testbed.Inspect).
func Attach(tb Attacher, host string, dev *roce.Device, m *Manager) (emulator.Env, error) {
	return AttachWith(tb, host, dev, m, dev)
}

// AttachWith is Attach with agent bound to UDP 4791 in the device's
// place: an agent that hands every datagram to the device, after looking
// at it (a checker of the traffic that reaches the host, say). Its Start
// must start the device with the Env it is given.
func AttachWith(tb Attacher, host string, dev *roce.Device, m *Manager, agent emulator.Agent) (emulator.Env, error) {
	env, err := tb.Attach(host, m.cfg.Port, &m.sock)
	if err != nil {
		return nil, err
	}
	m.sock.env = env
	denv, err := tb.Attach(host, wire.Port, agent)
	if err != nil {
		return nil, err
	}
	m.sock.dev.Store(&posterOf{denv})
	return denv, nil
}

// socket is the agent on the manager's port: it hands datagrams to the
// device's goroutine and sends for it.
type socket struct {
	m   *Manager
	env emulator.Env
	dev atomic.Pointer[posterOf]
}

type posterOf struct{ env emulator.Env }

// post runs f on env's goroutine: through emulator.Poster, or at once for
// an Env that is not one (test environments sharing one goroutine).
func post(env emulator.Env, f func()) {
	if p, ok := env.(emulator.Poster); ok {
		p.Post(f)
		return
	}
	f()
}

func (s *socket) Start(emulator.Env) {}

func (s *socket) Recv(from emulator.Addr, b []byte) {
	d := s.dev.Load()
	if d == nil {
		return // the device is not up yet: the peer sends again
	}
	b = bytes.Clone(b) // Recv only borrows it, and the manager runs later
	post(d.env, func() { s.m.recv(from.Addr(), b) })
}

func (m *Manager) send(to netip.Addr, b []byte) {
	env := m.sock.env
	dst := netip.AddrPortFrom(to, m.cfg.Port)
	post(env, func() { env.Send(dst, b) })
}

func (m *Manager) newID() uint32 {
	if m.nextID == 0 {
		m.nextID = m.dev.Env().Rand().Uint32()
	}
	for {
		m.nextID++
		if _, used := m.conns[m.nextID]; !used && m.nextID != 0 {
			return m.nextID
		}
	}
}

// Listen accepts connections to service: each gets a QP made with p,
// whose OnReady runs when it can receive; onConn runs once it is
// established. When the peer re-establishes a connection (Reconnect),
// OnReady and onConn run again for it, its Epoch one higher.
func (m *Manager) Listen(service uint64, p Params, onConn func(*Conn)) error {
	if _, ok := m.listeners[service]; ok {
		return fmt.Errorf("cm: service %d already has a listener", service)
	}
	if len(p.Private) > MaxPrivate {
		return fmt.Errorf("cm: %d bytes of private data, at most %d", len(p.Private), MaxPrivate)
	}
	p.defaults(m.dev)
	m.listeners[service] = &listener{params: p, onConn: onConn}
	return nil
}

// Connect connects to service on peer; done runs with the established
// connection, or with an error (rejected, no answer).
func (m *Manager) Connect(peer netip.Addr, service uint64, p Params, done func(*Conn, error)) error {
	if len(p.Private) > MaxPrivate {
		return fmt.Errorf("cm: %d bytes of private data, at most %d", len(p.Private), MaxPrivate)
	}
	if m.sock.env == nil || m.dev.Env() == nil {
		return errors.New("cm: not attached (use cm.Attach)")
	}
	p.defaults(m.dev)
	qp, err := m.newQP(p)
	if err != nil {
		return err
	}
	c := &Conn{QP: qp, Peer: peer.Unmap(), Service: service, Active: true, m: m, params: p, state: stConnecting,
		localID: m.newID(), psn: m.startPSN(p), done: done}
	m.conns[c.localID] = c
	c.request()
	return nil
}

// request sends the REQ of an active connection (a reconnection's names
// the passive side's connection in RemoteID).
func (c *Conn) request() {
	p := c.params
	c.sendMsg(&Msg{Type: TypeREQ, LocalID: c.localID, RemoteID: c.remoteID, Service: c.Service, QPN: c.QP.QPN(), PSN: c.psn,
		MTU: uint16(p.MTU), RespRes: uint8(p.ReadDepth), InitDepth: uint8(p.ReadDepth), RetryCnt: p.RetryCnt, RNRRetry: p.RNRRetry,
		Timeout: p.Timeout, Region: p.Region, Private: p.Private}, true)
}

// Reconnect re-establishes an established active connection on the same
// QP — as host software does with an unmodified RNIC once the QP went to
// ERR (a request whose retries ran out) or its outstanding requests are
// to be abandoned: the QP goes to RESET (its work requests are dropped
// without completions) and INIT, and a REQ with a fresh starting PSN and
// a new communication id, naming the passive side's connection, takes
// both sides through RTR and RTS again; the passive side's QP, reset the
// same way, keeps its number. OnReady runs again when the QP can
// receive; done runs with the connection once it is established again,
// or with an error (the QP is then destroyed, as a connection that
// never got up).
func (c *Conn) Reconnect(done func(*Conn, error)) error {
	if !c.Active {
		return errors.New("cm: only the side that connected re-establishes a connection")
	}
	if c.state != stEstablished {
		return fmt.Errorf("cm: re-establish a connection to %v that is not established", c.Peer)
	}
	if err := c.reinit(); err != nil {
		return err
	}
	m := c.m
	delete(m.conns, c.localID)
	c.localID = m.newID()
	m.conns[c.localID] = c
	c.psn = m.startPSN(c.params)
	c.state = stConnecting
	c.done = done
	c.Epoch++
	c.request()
	return nil
}

func (m *Manager) startPSN(p Params) uint32 {
	if p.FixPSN {
		return p.PSN & wire.PSNMask
	}
	return m.dev.Env().Rand().Uint32() & wire.PSNMask
}

// newQP creates a QP in INIT.
func (m *Manager) newQP(p Params) (*roce.QP, error) {
	qp, err := m.dev.CreateQP(p.QP)
	if err != nil {
		return nil, err
	}
	if err := toInit(qp, p); err != nil {
		qp.Destroy()
		return nil, err
	}
	return qp, nil
}

// toInit takes a QP in RESET to INIT.
func toInit(qp *roce.QP, p Params) error {
	return qp.Modify(roce.QPAttr{State: roce.StateInit, PKey: wire.DefaultPKey, Access: p.Access},
		roce.AttrState|roce.AttrPKey|roce.AttrAccess)
}

// reinit takes c's QP, in any state, through RESET (its work requests
// dropped without completions) to INIT, for a new epoch.
func (c *Conn) reinit() error {
	if err := c.QP.Modify(roce.QPAttr{State: roce.StateReset}, roce.AttrState); err != nil {
		return err
	}
	return toInit(c.QP, c.params)
}

// pathMTU returns the path MTU of a connection a REQ asks for, the
// smaller of its MTU and want; ok is false if the REQ is not acceptable.
func pathMTU(msg *Msg, want int) (mtu int, ok bool) {
	return min(int(msg.MTU), want), wire.ValidMTU(int(msg.MTU)) && len(msg.Private) <= MaxPrivate
}

// toRTR takes c's QP to RTR for a peer with QP qpn and starting PSN psn.
func (c *Conn) toRTR(qpn, psn uint32, mtu int) error {
	p := c.params
	return c.QP.Modify(roce.QPAttr{State: roce.StateRTR, PathMTU: mtu, DestQPN: qpn, Remote: c.Peer, RQPSN: psn,
		MaxDestRdAtomic: p.ReadDepth, MinRNRTimer: p.MinRNR},
		roce.AttrState|roce.AttrPathMTU|roce.AttrDestQPN|roce.AttrRemote|roce.AttrRQPSN|roce.AttrMaxDestRdAtomic|roce.AttrMinRNRTimer)
}

func (c *Conn) toRTS() error {
	p := c.params
	return c.QP.Modify(roce.QPAttr{State: roce.StateRTS, SQPSN: c.psn, Timeout: p.Timeout, RetryCnt: p.RetryCnt, RNRRetry: p.RNRRetry,
		MaxRdAtomic: min(p.ReadDepth, int(c.peerRes))},
		roce.AttrState|roce.AttrSQPSN|roce.AttrTimeout|roce.AttrRetryCnt|roce.AttrRNRRetry|roce.AttrMaxRdAtomic)
}

// sendMsg sends msg to the peer; with retry, again after each timeout
// until an answer stops it.
func (c *Conn) sendMsg(msg *Msg, retry bool) {
	b := msg.Append(nil)
	c.m.send(c.Peer, b)
	c.timer = stopTimer(c.timer)
	if retry {
		c.last, c.tries = b, 0
		c.arm()
	}
}

func (c *Conn) arm() {
	c.timer = c.m.dev.Env().After(c.m.cfg.Timeout, func() {
		c.timer = nil
		if c.state == stEstablished || c.state == stClosed {
			return
		}
		if c.tries >= c.m.cfg.Retries {
			c.giveUp()
			return
		}
		c.tries++
		c.m.send(c.Peer, c.last)
		c.arm()
	})
}

func stopTimer(t emulator.Timer) emulator.Timer {
	if t != nil {
		t.Stop()
	}
	return nil
}

// giveUp ends a connection whose peer stopped answering.
func (c *Conn) giveUp() {
	switch c.state {
	case stConnecting:
		c.fail(ErrTimeout)
	case stReady:
		c.close()
	case stClosing:
		c.state = stClosed
		c.forget()
	}
}

func (c *Conn) fail(err error) {
	c.close()
	if c.done != nil {
		done := c.done
		c.done = nil
		done(nil, fmt.Errorf("connect to %v service %d: %w", c.Peer, c.Service, err))
	}
}

// close destroys the QP of a connection that never got up.
func (c *Conn) close() {
	c.state = stClosed
	c.timer = stopTimer(c.timer)
	c.QP.Destroy()
	c.forget()
}

func (c *Conn) forget() {
	delete(c.m.conns, c.localID)
	if !c.Active {
		for _, id := range c.peerIDs {
			delete(c.m.passive, passiveKey{c.Peer, id})
		}
	}
}

// Disconnect tears the connection down: the QP goes to ERR at once
// (outstanding work completes flushed) and the peer is told with a DREQ.
func (c *Conn) Disconnect() {
	if c.state != stEstablished && c.state != stReady {
		return
	}
	c.QP.Modify(roce.QPAttr{State: roce.StateErr}, roce.AttrState)
	c.state = stClosing
	c.sendMsg(&Msg{Type: TypeDREQ, LocalID: c.localID, RemoteID: c.remoteID, Service: c.Service}, true)
}

// recv handles one datagram on the device's goroutine.
func (m *Manager) recv(from netip.Addr, b []byte) {
	msg, err := Decode(b)
	if err != nil {
		m.Malformed++
		return
	}
	if msg.Type == TypeREQ {
		m.request(from, &msg)
		return
	}
	c := m.conns[msg.RemoteID]
	if c == nil || c.Peer != from {
		m.Stray++
		if msg.Type == TypeDREQ { // already gone: confirm anyway
			m.send(from, (&Msg{Type: TypeDREP, LocalID: msg.RemoteID, RemoteID: msg.LocalID, Service: msg.Service}).Append(nil))
		}
		return
	}
	switch msg.Type {
	case TypeREP:
		c.reply(&msg)
	case TypeRTU:
		if c.state == stReady {
			c.establish()
		}
	case TypeREJ:
		if c.state == stConnecting {
			c.fail(fmt.Errorf("%w (reason %d)", ErrRejected, msg.Reason))
		}
	case TypeDREQ:
		m.send(from, (&Msg{Type: TypeDREP, LocalID: c.localID, RemoteID: c.remoteID, Service: c.Service}).Append(nil))
		if c.state == stEstablished || c.state == stReady {
			c.QP.Modify(roce.QPAttr{State: roce.StateErr}, roce.AttrState)
			c.state = stClosed
			c.timer = stopTimer(c.timer)
			c.forget()
			if c.params.OnDisconnect != nil {
				c.params.OnDisconnect(c)
			}
		}
	case TypeDREP:
		if c.state == stClosing {
			c.state = stClosed
			c.timer = stopTimer(c.timer)
			c.forget()
		}
	}
}

// request handles a REQ on the passive side.
func (m *Manager) request(from netip.Addr, msg *Msg) {
	key := passiveKey{from, msg.LocalID}
	if c := m.passive[key]; c != nil {
		// A duplicate: of this epoch's REQ, whose REP was lost (send it
		// again), or a late one of an earlier epoch (ignore it).
		if c.state == stReady && c.remoteID == msg.LocalID {
			m.send(from, c.last)
		}
		return
	}
	reject := func(reason uint8) {
		m.send(from, (&Msg{Type: TypeREJ, Reason: reason, RemoteID: msg.LocalID, Service: msg.Service}).Append(nil))
	}
	// A REQ that names a connection of ours re-establishes it; any
	// other asks a listener for a new one.
	var (
		params Params
		again  *Conn
		l      *listener
	)
	if msg.RemoteID != 0 {
		again = m.conns[msg.RemoteID]
		if again == nil || again.Active || again.Peer != from || again.Service != msg.Service ||
			(again.state != stEstablished && again.state != stReady) {
			reject(RejectStale)
			return
		}
		params = again.params
	} else {
		l = m.listeners[msg.Service]
		if l == nil {
			reject(RejectNoListener)
			return
		}
		params = l.params
	}
	mtu, ok := pathMTU(msg, params.MTU)
	if !ok {
		reject(RejectInvalid)
		return
	}
	if again != nil {
		again.rerequest(msg, mtu, reject)
		return
	}
	qp, err := m.newQP(l.params)
	if err != nil {
		reject(RejectResources)
		return
	}
	c := &Conn{QP: qp, Peer: from, Service: msg.Service, Remote: msg.Region, Private: append([]byte(nil), msg.Private...),
		m: m, params: l.params, state: stReady, localID: m.newID(), remoteID: msg.LocalID, psn: m.startPSN(l.params),
		peerRes: msg.RespRes, onConn: l.onConn}
	if err := c.toRTR(msg.QPN, msg.PSN, mtu); err != nil {
		qp.Destroy()
		reject(RejectInvalid)
		return
	}
	m.conns[c.localID] = c
	m.passive[key] = c
	c.peerIDs = append(c.peerIDs, msg.LocalID)
	c.ready(mtu)
}

// ready runs the passive side's OnReady and sends its REP.
func (c *Conn) ready(mtu int) {
	if c.params.OnReady != nil {
		c.params.OnReady(c)
	}
	p := c.params
	c.sendMsg(&Msg{Type: TypeREP, LocalID: c.localID, RemoteID: c.remoteID, Service: c.Service, QPN: c.QP.QPN(), PSN: c.psn,
		MTU: uint16(mtu), RespRes: uint8(p.ReadDepth), InitDepth: uint8(p.ReadDepth), RetryCnt: p.RetryCnt, RNRRetry: p.RNRRetry,
		Timeout: p.Timeout, Region: p.Region, Private: p.Private}, true)
}

// rerequest handles, on the passive side, a REQ that re-establishes c
// (Reconnect), of path MTU mtu: c's QP goes through RESET and INIT to
// RTR for the peer's new PSN, with a fresh PSN of its own, and the REP
// goes back; the RTU establishes it again.
func (c *Conn) rerequest(msg *Msg, mtu int, reject func(uint8)) {
	m := c.m
	c.timer = stopTimer(c.timer)
	err := c.reinit()
	c.psn = m.startPSN(c.params)
	if err == nil {
		err = c.toRTR(msg.QPN, msg.PSN, mtu)
	}
	if err != nil {
		// The QP is unusable: the connection is gone.
		reject(RejectInvalid)
		c.close()
		return
	}
	c.remoteID = msg.LocalID
	c.peerIDs = append(c.peerIDs, msg.LocalID)
	m.passive[passiveKey{c.Peer, msg.LocalID}] = c
	c.Remote, c.Private, c.peerRes = msg.Region, append([]byte(nil), msg.Private...), msg.RespRes
	c.state = stReady
	c.Epoch++
	c.ready(mtu)
}

// reply handles a REP on the active side.
func (c *Conn) reply(msg *Msg) {
	rtu := func() {
		c.m.send(c.Peer, (&Msg{Type: TypeRTU, LocalID: c.localID, RemoteID: c.remoteID, Service: c.Service}).Append(nil))
	}
	if c.state == stEstablished {
		rtu() // our RTU was lost
		return
	}
	if c.state != stConnecting {
		return
	}
	c.remoteID = msg.LocalID
	c.Remote = msg.Region
	c.Private = append([]byte(nil), msg.Private...)
	c.peerRes = msg.RespRes
	mtu := int(msg.MTU)
	if !wire.ValidMTU(mtu) || mtu > c.params.MTU {
		c.fail(fmt.Errorf("%w: the peer chose path MTU %d", ErrRejected, mtu))
		return
	}
	if err := c.toRTR(msg.QPN, msg.PSN, mtu); err != nil {
		c.fail(err)
		return
	}
	if c.params.OnReady != nil {
		c.params.OnReady(c)
	}
	if err := c.toRTS(); err != nil {
		c.fail(err)
		return
	}
	c.timer = stopTimer(c.timer)
	c.state = stEstablished
	rtu()
	if c.done != nil {
		done := c.done
		c.done = nil
		done(c, nil)
	}
}

// establish takes a passive connection to RTS on the RTU.
func (c *Conn) establish() {
	if err := c.toRTS(); err != nil {
		c.close()
		return
	}
	c.timer = stopTimer(c.timer)
	c.state = stEstablished
	if c.onConn != nil {
		c.onConn(c)
	}
}
