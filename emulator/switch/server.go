//go:build linux && !nonetns

package goswitch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/p4rt"
)

// APIVersion is the P4Runtime version the server implements.
const APIVersion = "1.4.1"

// Server is the switch's P4Runtime service (github.com/p4lang/p4runtime
// p4/v1, P4Runtime 1.4.1; docs/netns.md has the conformance table):
//
//   - SetForwardingPipelineConfig loads the registered program whose
//     P4Info the request carries: VERIFY; VERIFY_AND_SAVE, after which
//     reads and writes go to the saved program (fresh state) while packets
//     still meet the running one, until COMMIT makes it run;
//     VERIFY_AND_COMMIT (fresh state); RECONCILE_AND_COMMIT with the
//     running program (state kept). GetForwardingPipelineConfig returns
//     the running program's P4Info, cookie and device config.
//   - Write applies a CONTINUE_ON_ERROR batch through the program's
//     p4rt.Device, only for the primary controller of the role, and
//     reports each update's status; Read serves anyone, batch by batch
//     with per-query statuses.
//   - StreamChannel carries master arbitration (per role, the connected
//     client with the highest election id ever seen is primary; others are
//     backups, ALREADY_EXISTS; with no primary connected every client is
//     told NOT_FOUND until one claims an id at least that high; two clients
//     may not hold one id, INVALID_ARGUMENT), packet-out (from the
//     primary: injected on the CPU port), packet-in (frames the pipeline
//     sends to the CPU port, to the primary of every role) and digests.
//   - Capabilities reports the API version.
//
// The served P4Info is the program's plus the switch's own port counters
// (tracebed.port_*). Malformed requests get gRPC errors; the server never
// panics on them.
type Server struct {
	p4v1.UnimplementedP4RuntimeServer
	sw *Switch

	mu        sync.Mutex
	roles     map[string]*role
	cookie    *p4v1.ForwardingPipelineConfig_Cookie // the running program's
	devConfig []byte
	saved     *savedConfig // VERIFY_AND_SAVE, waiting for COMMIT

	dmu     sync.Mutex // digests
	dq      *p4rt.DigestQueue
	dtimer  *time.Timer
	dtimeAt time.Time
}

type savedConfig struct {
	cookie    *p4v1.ForwardingPipelineConfig_Cookie
	devConfig []byte
}

type role struct {
	highest *p4v1.Uint128 // highest election id ever received
	primary *stream
	streams map[*stream]bool
}

type stream struct {
	out      chan *p4v1.StreamMessageResponse
	election *p4v1.Uint128
	role     string
	device   uint64
}

// streamBuffer is how many messages (packet-ins, digests, notifications)
// wait for a slow client before more are dropped.
const streamBuffer = 1024

// NewServer returns the P4Runtime service of sw. Frames the pipeline sends
// to the CPU port and digests go to its controllers from then on.
func NewServer(sw *Switch) *Server {
	s := &Server{sw: sw, roles: map[string]*role{}, dq: p4rt.NewDigestQueue()}
	sw.notify.Store(&notifier{packetIn: s.packetIn, digest: s.digest})
	return s
}

// Register adds the service to a gRPC server.
func (s *Server) Register(g *grpc.Server) { p4v1.RegisterP4RuntimeServer(g, s) }

// NewGRPCServer returns a gRPC server that turns a panic in any handler
// into an INTERNAL error for that call (grpc-go would let it end the
// process), for serving the switch.
func NewGRPCServer(opts ...grpc.ServerOption) *grpc.Server {
	opts = append(opts,
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
			defer func() {
				if r := recover(); r != nil {
					resp, err = nil, status.Errorf(codes.Internal, "%s: %v", info.FullMethod, r)
				}
			}()
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
			defer func() {
				if r := recover(); r != nil {
					err = status.Errorf(codes.Internal, "%s: %v", info.FullMethod, r)
				}
			}()
			return h(srv, ss)
		}))
	return grpc.NewServer(opts...)
}

func (s *Server) checkDevice(id uint64) error {
	if id != s.sw.cfg.DeviceID {
		return status.Errorf(codes.NotFound, "device id %d: this switch (%s) is device %d", id, s.sw.cfg.Name, s.sw.cfg.DeviceID)
	}
	return nil
}

func cmp128(a, b *p4v1.Uint128) int {
	switch {
	case a.GetHigh() != b.GetHigh():
		if a.GetHigh() < b.GetHigh() {
			return -1
		}
		return 1
	case a.GetLow() != b.GetLow():
		if a.GetLow() < b.GetLow() {
			return -1
		}
		return 1
	}
	return 0
}

// checkPrimary returns PERMISSION_DENIED unless election is the id of the
// connected primary of roleName.
func (s *Server) checkPrimary(roleName string, election *p4v1.Uint128) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.roles[roleName]
	if r == nil && roleName != "" {
		return status.Errorf(codes.NotFound, "no role %q on this device: a controller of the role arbitrates first", roleName)
	}
	if r == nil || r.primary == nil {
		return status.Errorf(codes.PermissionDenied, "no primary controller for role %q: open a StreamChannel and send a MasterArbitrationUpdate first", roleName)
	}
	if election == nil || cmp128(election, r.primary.election) != 0 {
		return status.Errorf(codes.PermissionDenied, "election id %v is not the primary's for role %q", fmtID(election), roleName)
	}
	return nil
}

func fmtID(id *p4v1.Uint128) string {
	if id == nil {
		return "(none)"
	}
	return fmt.Sprintf("%d:%d", id.GetHigh(), id.GetLow())
}

// device runs f with the device reads and writes go to (the staged
// program's after VERIFY_AND_SAVE, otherwise the running one's) on the
// data-plane goroutine.
func (s *Server) device(ctx context.Context, f func(d *switchDevice) error) error {
	return s.onSwitch(ctx, func() error { return f(&switchDevice{s.sw, s.sw.controlDevice()}) })
}

// onSwitch runs f on the data-plane goroutine; a panic in f is INTERNAL.
func (s *Server) onSwitch(ctx context.Context, f func() error) error {
	var err error
	if derr := s.sw.Do(ctx, func() {
		defer func() {
			if r := recover(); r != nil {
				err = status.Errorf(codes.Internal, "device: %v", r)
			}
		}()
		err = f()
	}); derr != nil {
		if errors.Is(derr, ErrStopped) {
			return status.Error(codes.Unavailable, "switch stopped")
		}
		return status.FromContextError(derr).Err()
	}
	return err
}

// Write implements p4v1.P4RuntimeServer (P4Runtime §12).
func (s *Server) Write(ctx context.Context, req *p4v1.WriteRequest) (*p4v1.WriteResponse, error) {
	if err := s.checkDevice(req.GetDeviceId()); err != nil {
		return nil, err
	}
	if err := s.checkPrimary(req.GetRole(), req.GetElectionId()); err != nil {
		return nil, err
	}
	switch req.GetAtomicity() {
	case p4v1.WriteRequest_CONTINUE_ON_ERROR:
	default:
		return nil, status.Errorf(codes.Unimplemented, "atomicity %v: the Go switch supports CONTINUE_ON_ERROR", req.GetAtomicity())
	}
	updates := req.GetUpdates()
	if len(updates) == 0 {
		return &p4v1.WriteResponse{}, nil
	}
	err := s.device(ctx, func(d *switchDevice) error { return d.Write(updates) })
	if err == nil {
		return &p4v1.WriteResponse{}, nil
	}
	var be *p4rt.BatchError
	if errors.As(err, &be) && len(be.Errs) == len(updates) {
		return nil, be.Status().Err()
	}
	return nil, err
}

// Read implements p4v1.P4RuntimeServer (P4Runtime §13): every query is
// answered; entities stream back in chunks, and if some queries failed the
// stream ends with UNKNOWN and one p4.v1.Error per query.
func (s *Server) Read(req *p4v1.ReadRequest, srv p4v1.P4Runtime_ReadServer) error {
	if err := s.checkDevice(req.GetDeviceId()); err != nil {
		return err
	}
	if len(req.GetEntities()) == 0 {
		return status.Error(codes.InvalidArgument, "read request with no entities")
	}
	var out []*p4v1.Entity
	var rerr error
	ctx := srv.Context()
	if err := s.device(ctx, func(d *switchDevice) error {
		out, rerr = p4rt.ReadBatch(ctx, d, req.GetEntities(), func(*p4v1.Entity) error { return nil })
		return nil
	}); err != nil {
		return err
	}
	// Stream in chunks that stay well under gRPC's 4 MiB message limit.
	const chunk = 1000
	for len(out) > 0 {
		n := min(len(out), chunk)
		if err := srv.Send(&p4v1.ReadResponse{Entities: out[:n]}); err != nil {
			return err
		}
		out = out[n:]
	}
	var be *p4rt.BatchError
	if errors.As(rerr, &be) {
		return be.Status().Err()
	}
	return rerr
}

// SetForwardingPipelineConfig implements p4v1.P4RuntimeServer
// (P4Runtime §14).
func (s *Server) SetForwardingPipelineConfig(ctx context.Context, req *p4v1.SetForwardingPipelineConfigRequest) (*p4v1.SetForwardingPipelineConfigResponse, error) {
	if err := s.checkDevice(req.GetDeviceId()); err != nil {
		return nil, err
	}
	if err := s.checkPrimary(req.GetRole(), req.GetElectionId()); err != nil {
		return nil, err
	}
	action := req.GetAction()
	cfg := req.GetConfig()
	if action == p4v1.SetForwardingPipelineConfigRequest_COMMIT {
		if cfg != nil {
			return nil, status.Error(codes.InvalidArgument, "COMMIT takes no config: it commits the one VERIFY_AND_SAVE saved")
		}
		s.mu.Lock()
		saved := s.saved
		s.mu.Unlock()
		if saved == nil {
			return nil, status.Error(codes.NotFound, "COMMIT without a saved config (VERIFY_AND_SAVE first)")
		}
		committed := false
		if err := s.onSwitch(ctx, func() error {
			if s.sw.staged != nil {
				s.sw.run(s.sw.staged)
				committed = true
			}
			return nil
		}); err != nil {
			return nil, err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if !committed || s.saved != saved {
			return nil, status.Error(codes.Aborted, "the saved config changed during COMMIT")
		}
		s.cookie, s.devConfig, s.saved = saved.cookie, saved.devConfig, nil
		return &p4v1.SetForwardingPipelineConfigResponse{}, nil
	}
	switch action {
	case p4v1.SetForwardingPipelineConfigRequest_VERIFY, p4v1.SetForwardingPipelineConfigRequest_VERIFY_AND_SAVE,
		p4v1.SetForwardingPipelineConfigRequest_VERIFY_AND_COMMIT, p4v1.SetForwardingPipelineConfigRequest_RECONCILE_AND_COMMIT:
	default:
		return nil, status.Errorf(codes.InvalidArgument, "action %v", action)
	}
	info := cfg.GetP4Info()
	if info == nil {
		return nil, status.Error(codes.InvalidArgument, "config has no P4Info")
	}
	prog, err := s.sw.cfg.Programs.Match(stripSwitchObjects(info))
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	next := &savedConfig{cookie: cfg.GetCookie(), devConfig: cfg.GetP4DeviceConfig()}
	switch action {
	case p4v1.SetForwardingPipelineConfigRequest_VERIFY:
		return &p4v1.SetForwardingPipelineConfigResponse{}, nil
	case p4v1.SetForwardingPipelineConfigRequest_RECONCILE_AND_COMMIT:
		var same bool
		if err := s.onSwitch(ctx, func() error { same = s.sw.program == prog; return nil }); err != nil {
			return nil, err
		}
		if !same {
			return nil, status.Errorf(codes.Unimplemented, "RECONCILE_AND_COMMIT to another program (%s): use VERIFY_AND_COMMIT", prog.Name)
		}
		s.mu.Lock()
		s.cookie, s.devConfig = next.cookie, next.devConfig
		s.mu.Unlock()
		return &p4v1.SetForwardingPipelineConfigResponse{}, nil
	}
	// VERIFY_AND_SAVE stages the program; VERIFY_AND_COMMIT runs it. Both
	// start from the Go twin's initial state: the topology's routes.
	commit := action == p4v1.SetForwardingPipelineConfigRequest_VERIFY_AND_COMMIT
	if err := s.onSwitch(ctx, func() error {
		l, err := s.sw.build(prog)
		if err != nil {
			return status.Error(codes.Internal, err.Error())
		}
		if commit {
			s.sw.run(l)
		} else {
			s.sw.staged = l
		}
		return nil
	}); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if commit {
		s.cookie, s.devConfig, s.saved = next.cookie, next.devConfig, nil
	} else {
		s.saved = next
	}
	return &p4v1.SetForwardingPipelineConfigResponse{}, nil
}

// GetForwardingPipelineConfig implements p4v1.P4RuntimeServer
// (P4Runtime §15): the running program's config, even while another is
// saved for COMMIT.
func (s *Server) GetForwardingPipelineConfig(ctx context.Context, req *p4v1.GetForwardingPipelineConfigRequest) (*p4v1.GetForwardingPipelineConfigResponse, error) {
	if err := s.checkDevice(req.GetDeviceId()); err != nil {
		return nil, err
	}
	var info *p4configv1.P4Info
	if err := s.onSwitch(ctx, func() error { info = (&switchDevice{s.sw, s.sw.device}).P4Info(); return nil }); err != nil {
		return nil, err
	}
	s.mu.Lock()
	cfg := &p4v1.ForwardingPipelineConfig{Cookie: s.cookie}
	dev := s.devConfig
	s.mu.Unlock()
	switch req.GetResponseType() {
	case p4v1.GetForwardingPipelineConfigRequest_ALL:
		cfg.P4Info, cfg.P4DeviceConfig = info, dev
	case p4v1.GetForwardingPipelineConfigRequest_P4INFO_AND_COOKIE:
		cfg.P4Info = info
	case p4v1.GetForwardingPipelineConfigRequest_DEVICE_CONFIG_AND_COOKIE:
		cfg.P4DeviceConfig = dev
	case p4v1.GetForwardingPipelineConfigRequest_COOKIE_ONLY:
	default:
		return nil, status.Errorf(codes.InvalidArgument, "response type %v", req.GetResponseType())
	}
	return &p4v1.GetForwardingPipelineConfigResponse{Config: cfg}, nil
}

// Capabilities implements p4v1.P4RuntimeServer.
func (s *Server) Capabilities(context.Context, *p4v1.CapabilitiesRequest) (*p4v1.CapabilitiesResponse, error) {
	return &p4v1.CapabilitiesResponse{P4RuntimeApiVersion: APIVersion}, nil
}

// StreamChannel implements p4v1.P4RuntimeServer (P4Runtime §16): master
// arbitration, packet-out and packet-in, digest lists and their
// acknowledgements.
func (s *Server) StreamChannel(srv p4v1.P4Runtime_StreamChannelServer) error {
	st := &stream{out: make(chan *p4v1.StreamMessageResponse, streamBuffer)}
	ctx := srv.Context()
	sendErr := make(chan error, 1)
	go func() {
		for {
			select {
			case m := <-st.out:
				if err := srv.Send(m); err != nil {
					sendErr <- err
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	defer s.leave(st)
	arbitrated := false
	for {
		req, err := srv.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		select {
		case err := <-sendErr:
			return err
		default:
		}
		switch m := req.GetUpdate().(type) {
		case *p4v1.StreamMessageRequest_Arbitration:
			if err := s.arbitrate(st, m.Arbitration, arbitrated); err != nil {
				return err
			}
			arbitrated = true
		case *p4v1.StreamMessageRequest_Packet:
			if !arbitrated {
				return status.Error(codes.FailedPrecondition, "send a MasterArbitrationUpdate before anything else")
			}
			s.packetOut(ctx, st, m.Packet, req)
		case *p4v1.StreamMessageRequest_DigestAck:
			if !arbitrated {
				return status.Error(codes.FailedPrecondition, "send a MasterArbitrationUpdate before anything else")
			}
			s.digestAck(ctx, st, m.DigestAck, req)
		default:
			if !arbitrated {
				return status.Error(codes.InvalidArgument, "stream message without an update: send a MasterArbitrationUpdate")
			}
			s.streamError(st, codes.InvalidArgument, "stream message without an update", req)
		}
	}
}

func (s *Server) isPrimary(st *stream) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.roles[st.role]
	return r != nil && r.primary == st
}

// packetOut injects a controller's packet on the CPU port of the running
// program (§16.1): only the primary may send, and the metadata must be
// the P4Info's packet_out header; otherwise the packet is dropped and a
// StreamError says why.
func (s *Server) packetOut(ctx context.Context, st *stream, po *p4v1.PacketOut, req *p4v1.StreamMessageRequest) {
	if !s.isPrimary(st) {
		s.streamError(st, codes.PermissionDenied, "packet-out from a controller that is not primary", req)
		return
	}
	err := s.onSwitch(ctx, func() error {
		if !s.sw.pio.HasPacketOut() {
			return status.Errorf(codes.Unimplemented, "program %s declares no packet_out controller header", s.sw.program.Name)
		}
		frame, err := s.sw.pio.OutFrame(po)
		if err != nil {
			return err
		}
		s.sw.process(s.sw.now(), emulator.CPUPort, frame, true)
		return nil
	})
	if err != nil {
		e := status.Convert(err)
		s.streamError(st, e.Code(), e.Message(), req)
	}
}

// packetIn sends a frame the pipeline sent to the CPU port to the primary
// controller of every role. It runs on the data-plane goroutine and never
// blocks: a frame nobody can take is counted (tracebed.switch_drops[2]).
func (s *Server) packetIn(frame []byte) {
	pi, err := s.sw.pio.PacketIn(frame)
	if err != nil {
		s.sw.cpuDrops++
		return
	}
	if !s.toPrimaries(&p4v1.StreamMessageResponse{Update: &p4v1.StreamMessageResponse_Packet{Packet: pi}}) {
		s.sw.cpuDrops++
	}
}

// toPrimaries queues m for the primary of every role; it reports whether
// one took it.
func (s *Server) toPrimaries(m *p4v1.StreamMessageResponse) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	sent := false
	for _, r := range s.roles {
		if r.primary == nil {
			continue
		}
		select {
		case r.primary.out <- m:
			sent = true
		default:
		}
	}
	return sent
}

// digest queues one digest message (§9.8); it runs on the data-plane
// goroutine.
func (s *Server) digest(id uint32, cfg *p4v1.DigestEntry_Config, data *p4v1.P4Data) {
	s.dmu.Lock()
	lists := s.dq.Add(time.Now(), id, cfg, data)
	s.scheduleDigests()
	s.dmu.Unlock()
	s.sendDigests(lists)
}

// scheduleDigests arms the timer for the queue's next deadline. Called
// with s.dmu held.
func (s *Server) scheduleDigests() {
	at, ok := s.dq.Next()
	if !ok || s.dtimer != nil && !s.dtimeAt.After(at) {
		return
	}
	if s.dtimer != nil {
		s.dtimer.Stop()
	}
	s.dtimeAt = at
	s.dtimer = time.AfterFunc(time.Until(at), func() {
		s.dmu.Lock()
		s.dtimer = nil
		lists := s.dq.Tick(time.Now())
		s.scheduleDigests()
		s.dmu.Unlock()
		s.sendDigests(lists)
	})
}

func (s *Server) sendDigests(lists []*p4v1.DigestList) {
	for _, l := range lists {
		s.toPrimaries(&p4v1.StreamMessageResponse{Update: &p4v1.StreamMessageResponse_Digest{Digest: l}})
	}
}

// digestAck forgets an acknowledged digest list; a digest id the program
// does not declare is a StreamError (INVALID_ARGUMENT).
func (s *Server) digestAck(ctx context.Context, st *stream, a *p4v1.DigestListAck, req *p4v1.StreamMessageRequest) {
	known := false
	if err := s.onSwitch(ctx, func() error {
		for _, d := range s.sw.program.P4Info.GetDigests() {
			known = known || d.GetPreamble().GetId() == a.GetDigestId()
		}
		return nil
	}); err != nil {
		return
	}
	if !known {
		s.streamError(st, codes.InvalidArgument, fmt.Sprintf("digest ack: the program has no digest with id %#x", a.GetDigestId()), req)
		return
	}
	s.dmu.Lock()
	s.dq.Ack(a.GetDigestId(), a.GetListId())
	s.dmu.Unlock()
}

func (s *Server) streamError(st *stream, c codes.Code, msg string, req *p4v1.StreamMessageRequest) {
	e := &p4v1.StreamError{CanonicalCode: int32(c), Message: msg}
	switch {
	case req.GetPacket() != nil:
		e.Details = &p4v1.StreamError_PacketOut{PacketOut: &p4v1.PacketOutError{PacketOut: req.GetPacket()}}
	case req.GetDigestAck() != nil:
		e.Details = &p4v1.StreamError_DigestListAck{DigestListAck: &p4v1.DigestListAckError{DigestListAck: req.GetDigestAck()}}
	}
	select {
	case st.out <- &p4v1.StreamMessageResponse{Update: &p4v1.StreamMessageResponse_Error{Error: e}}:
	default:
	}
}

// arbitrate applies a MasterArbitrationUpdate (§5.3); an error ends the
// stream.
func (s *Server) arbitrate(st *stream, a *p4v1.MasterArbitrationUpdate, again bool) error {
	if again && a.GetDeviceId() != st.device {
		return status.Errorf(codes.FailedPrecondition, "a stream cannot change device (%d → %d)", st.device, a.GetDeviceId())
	}
	if err := s.checkDevice(a.GetDeviceId()); err != nil {
		return err
	}
	roleName := a.GetRole().GetName()
	if a.GetRole().GetConfig() != nil {
		return status.Error(codes.InvalidArgument, "role.config: this switch agrees on no role configuration scheme (every role has full pipeline access); leave it unset")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if again && roleName != st.role {
		return status.Errorf(codes.FailedPrecondition, "a stream cannot change role (%q → %q)", st.role, roleName)
	}
	r := s.roles[roleName]
	if r == nil {
		r = &role{streams: map[*stream]bool{}}
		s.roles[roleName] = r
	}
	id := a.GetElectionId()
	if id != nil {
		for o := range r.streams {
			if o != st && o.election != nil && cmp128(o.election, id) == 0 {
				return status.Errorf(codes.InvalidArgument, "election id %s is held by another controller of role %q", fmtID(id), roleName)
			}
		}
	}
	st.role, st.device = roleName, a.GetDeviceId()
	st.election = nil
	if id != nil {
		st.election = &p4v1.Uint128{High: id.GetHigh(), Low: id.GetLow()}
	}
	r.streams[st] = true
	old := r.primary
	if id != nil && (r.highest == nil || cmp128(id, r.highest) >= 0) {
		r.highest = st.election
		r.primary = st
	} else if r.primary == st {
		r.primary = nil // the primary lowered its id
	}
	if r.primary != old {
		for o := range r.streams {
			s.notify(r, o, roleName, a.GetDeviceId())
		}
		s.dmu.Lock()
		s.dq.Reset() // §9.8: the cache may be emptied on a change of primary
		s.dmu.Unlock()
	} else {
		s.notify(r, st, roleName, a.GetDeviceId())
	}
	return nil
}

// notify sends o its arbitration status. Called with s.mu held.
func (s *Server) notify(r *role, o *stream, roleName string, device uint64) {
	c, msg := codes.OK, "primary"
	switch {
	case r.primary == nil:
		c, msg = codes.NotFound, "no primary"
	case r.primary != o:
		c, msg = codes.AlreadyExists, "backup: another controller is primary"
	}
	u := &p4v1.MasterArbitrationUpdate{DeviceId: device, ElectionId: r.highest,
		Status: &rpcstatus.Status{Code: int32(c), Message: msg}}
	if roleName != "" {
		u.Role = &p4v1.Role{Name: roleName}
	}
	select {
	case o.out <- &p4v1.StreamMessageResponse{Update: &p4v1.StreamMessageResponse_Arbitration{Arbitration: u}}:
	default: // a client that does not read its stream misses advisories
	}
}

// leave removes a closed stream; if it was primary, the others learn there
// is none.
func (s *Server) leave(st *stream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.roles[st.role]
	if r == nil || !r.streams[st] {
		return
	}
	delete(r.streams, st)
	if r.primary == st {
		r.primary = nil
		for o := range r.streams {
			s.notify(r, o, st.role, s.sw.cfg.DeviceID)
		}
	}
}
