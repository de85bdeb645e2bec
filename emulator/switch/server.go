package goswitch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/genproto/googleapis/rpc/code"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
)

// APIVersion is the P4Runtime version the server implements.
const APIVersion = "1.4.1"

// Server is the switch's P4Runtime service (github.com/p4lang/p4runtime
// p4/v1):
//
//   - SetForwardingPipelineConfig loads the registered program whose
//     P4Info the request carries (VERIFY, VERIFY_AND_SAVE, COMMIT,
//     VERIFY_AND_COMMIT; RECONCILE_AND_COMMIT with the running program
//     keeps its state); GetForwardingPipelineConfig returns it.
//   - Write applies table, action-profile, counter, register and
//     multicast-group updates through the program's p4rt.Device, only for
//     the primary controller of the role; Read serves anyone.
//   - StreamChannel carries master arbitration: per role, the connected
//     client with the highest election id ever seen is primary; others
//     are backups (ALREADY_EXISTS), and with no primary connected every
//     client is told NOT_FOUND until one claims an id at least that high.
//     Two clients may not hold the same id (INVALID_ARGUMENT).
//   - Capabilities reports the API version.
//
// The served P4Info is the program's plus the switch's own port counters
// (tracebed.port_*). Malformed requests get gRPC errors; the server never
// panics on them.
type Server struct {
	p4v1.UnimplementedP4RuntimeServer
	sw *Switch

	mu     sync.Mutex
	roles  map[string]*role
	cookie uint64
	saved  *Program // VERIFY_AND_SAVE, waiting for COMMIT
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
}

// NewServer returns the P4Runtime service of sw.
func NewServer(sw *Switch) *Server {
	return &Server{sw: sw, roles: map[string]*role{}}
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

// device runs f with the running program's device on the data-plane
// goroutine.
func (s *Server) device(ctx context.Context, f func(d *switchDevice) error) error {
	var err error
	if derr := s.sw.Do(ctx, func() {
		defer func() {
			if r := recover(); r != nil {
				err = status.Errorf(codes.Internal, "device: %v", r)
			}
		}()
		err = f(&switchDevice{s.sw})
	}); derr != nil {
		if errors.Is(derr, ErrStopped) {
			return status.Error(codes.Unavailable, "switch stopped")
		}
		return status.FromContextError(derr).Err()
	}
	return err
}

// Write implements p4v1.P4RuntimeServer.
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
	var failed int
	err := s.device(ctx, func(d *switchDevice) error {
		// p4rt.Device stops at the first failure: find which update
		// failed by applying them one at a time.
		for i, u := range updates {
			if err := d.Write([]*p4v1.Update{u}); err != nil {
				failed = i
				return err
			}
		}
		return nil
	})
	if err == nil {
		return &p4v1.WriteResponse{}, nil
	}
	st, ok := status.FromError(err)
	if !ok || st.Code() == codes.Unavailable || st.Code() == codes.Internal {
		return nil, err
	}
	return nil, batchError(len(updates), failed, st)
}

// batchError builds the P4Runtime error of a batch whose update failed
// failed with st: code UNKNOWN, and one p4.v1.Error per update in details
// (OK before it, ABORTED after it: not attempted).
func batchError(n, failed int, st *status.Status) error {
	details := make([]*anypb.Any, n)
	for i := range n {
		e := &p4v1.Error{CanonicalCode: int32(code.Code_OK)}
		switch {
		case i == failed:
			e = &p4v1.Error{CanonicalCode: int32(st.Code()), Message: st.Message()}
		case i > failed:
			e = &p4v1.Error{CanonicalCode: int32(code.Code_ABORTED), Message: "not attempted: an earlier update failed"}
		}
		details[i], _ = anypb.New(e)
	}
	p := &rpcstatus.Status{Code: int32(codes.Unknown), Message: fmt.Sprintf("update %d of %d failed: %s", failed, n, st.Message()), Details: details}
	return status.ErrorProto(p)
}

// Read implements p4v1.P4RuntimeServer.
func (s *Server) Read(req *p4v1.ReadRequest, srv p4v1.P4Runtime_ReadServer) error {
	if err := s.checkDevice(req.GetDeviceId()); err != nil {
		return err
	}
	if len(req.GetEntities()) == 0 {
		return status.Error(codes.InvalidArgument, "read request with no entities")
	}
	var out []*p4v1.Entity
	err := s.device(srv.Context(), func(d *switchDevice) error {
		for _, q := range req.GetEntities() {
			if err := d.Read(q, func(e *p4v1.Entity) error {
				out = append(out, e)
				return nil
			}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
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
	return nil
}

// SetForwardingPipelineConfig implements p4v1.P4RuntimeServer.
func (s *Server) SetForwardingPipelineConfig(ctx context.Context, req *p4v1.SetForwardingPipelineConfigRequest) (*p4v1.SetForwardingPipelineConfigResponse, error) {
	if err := s.checkDevice(req.GetDeviceId()); err != nil {
		return nil, err
	}
	if err := s.checkPrimary(req.GetRole(), req.GetElectionId()); err != nil {
		return nil, err
	}
	action := req.GetAction()
	var prog *Program
	if action != p4v1.SetForwardingPipelineConfigRequest_COMMIT {
		info := req.GetConfig().GetP4Info()
		if info == nil {
			return nil, status.Error(codes.InvalidArgument, "config has no P4Info")
		}
		p, err := s.sw.cfg.Programs.Match(stripSwitchObjects(info))
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		prog = p
	}
	cookie := req.GetConfig().GetCookie().GetCookie()
	switch action {
	case p4v1.SetForwardingPipelineConfigRequest_VERIFY:
		return &p4v1.SetForwardingPipelineConfigResponse{}, nil
	case p4v1.SetForwardingPipelineConfigRequest_VERIFY_AND_SAVE:
		s.mu.Lock()
		s.saved, s.cookie = prog, cookie
		s.mu.Unlock()
		return &p4v1.SetForwardingPipelineConfigResponse{}, nil
	case p4v1.SetForwardingPipelineConfigRequest_COMMIT:
		s.mu.Lock()
		prog, s.saved = s.saved, nil
		s.mu.Unlock()
		if prog == nil {
			return nil, status.Error(codes.FailedPrecondition, "COMMIT without a saved config (VERIFY_AND_SAVE first)")
		}
	case p4v1.SetForwardingPipelineConfigRequest_VERIFY_AND_COMMIT:
	case p4v1.SetForwardingPipelineConfigRequest_RECONCILE_AND_COMMIT:
		var same bool
		if err := s.device(ctx, func(d *switchDevice) error { same = s.sw.program == prog; return nil }); err != nil {
			return nil, err
		}
		if !same {
			return nil, status.Errorf(codes.Unimplemented, "RECONCILE_AND_COMMIT to another program (%s): use VERIFY_AND_COMMIT", prog.Name)
		}
		s.mu.Lock()
		s.cookie = cookie
		s.mu.Unlock()
		return &p4v1.SetForwardingPipelineConfigResponse{}, nil
	default:
		return nil, status.Errorf(codes.InvalidArgument, "action %v", action)
	}
	if err := s.device(ctx, func(d *switchDevice) error { return s.sw.load(prog) }); err != nil {
		if _, ok := status.FromError(err); ok {
			return nil, err
		}
		return nil, status.Error(codes.Internal, err.Error())
	}
	s.mu.Lock()
	if action != p4v1.SetForwardingPipelineConfigRequest_COMMIT {
		s.cookie = cookie
	}
	s.mu.Unlock()
	return &p4v1.SetForwardingPipelineConfigResponse{}, nil
}

// GetForwardingPipelineConfig implements p4v1.P4RuntimeServer.
func (s *Server) GetForwardingPipelineConfig(ctx context.Context, req *p4v1.GetForwardingPipelineConfigRequest) (*p4v1.GetForwardingPipelineConfigResponse, error) {
	if err := s.checkDevice(req.GetDeviceId()); err != nil {
		return nil, err
	}
	var info *p4configv1.P4Info
	if err := s.device(ctx, func(d *switchDevice) error { info = d.P4Info(); return nil }); err != nil {
		return nil, err
	}
	s.mu.Lock()
	cookie := s.cookie
	s.mu.Unlock()
	cfg := &p4v1.ForwardingPipelineConfig{Cookie: &p4v1.ForwardingPipelineConfig_Cookie{Cookie: cookie}}
	switch req.GetResponseType() {
	case p4v1.GetForwardingPipelineConfigRequest_ALL, p4v1.GetForwardingPipelineConfigRequest_P4INFO_AND_COOKIE:
		cfg.P4Info = info
	case p4v1.GetForwardingPipelineConfigRequest_COOKIE_ONLY, p4v1.GetForwardingPipelineConfigRequest_DEVICE_CONFIG_AND_COOKIE:
	default:
		return nil, status.Errorf(codes.InvalidArgument, "response type %v", req.GetResponseType())
	}
	return &p4v1.GetForwardingPipelineConfigResponse{Config: cfg}, nil
}

// Capabilities implements p4v1.P4RuntimeServer.
func (s *Server) Capabilities(context.Context, *p4v1.CapabilitiesRequest) (*p4v1.CapabilitiesResponse, error) {
	return &p4v1.CapabilitiesResponse{P4RuntimeApiVersion: APIVersion}, nil
}

// StreamChannel implements p4v1.P4RuntimeServer: master arbitration.
func (s *Server) StreamChannel(srv p4v1.P4Runtime_StreamChannelServer) error {
	st := &stream{out: make(chan *p4v1.StreamMessageResponse, 16)}
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
			s.streamError(st, codes.Unimplemented, "packet-out: the programs of this switch declare no controller packet metadata", req)
		case *p4v1.StreamMessageRequest_DigestAck:
			s.streamError(st, codes.Unimplemented, "digests are not supported", req)
		default:
			if !arbitrated {
				return status.Error(codes.InvalidArgument, "stream message without an update: send a MasterArbitrationUpdate")
			}
			s.streamError(st, codes.InvalidArgument, "stream message without an update", req)
		}
	}
}

func (s *Server) streamError(st *stream, c codes.Code, msg string, req *p4v1.StreamMessageRequest) {
	e := &p4v1.StreamError{CanonicalCode: int32(c), Message: msg}
	if p := req.GetPacket(); p != nil {
		e.Details = &p4v1.StreamError_PacketOut{PacketOut: &p4v1.PacketOutError{PacketOut: p}}
	}
	select {
	case st.out <- &p4v1.StreamMessageResponse{Update: &p4v1.StreamMessageResponse_Error{Error: e}}:
	default:
	}
}

func (s *Server) arbitrate(st *stream, a *p4v1.MasterArbitrationUpdate, again bool) error {
	if err := s.checkDevice(a.GetDeviceId()); err != nil {
		return err
	}
	roleName := a.GetRole().GetName()
	if a.GetRole().GetConfig() != nil {
		return status.Error(codes.Unimplemented, "role configurations are not supported: every role may write every entity")
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
	st.role = roleName
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
