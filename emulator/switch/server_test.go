//go:build linux && !nonetns

package goswitch

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/dataplane"
	"github.com/tracebed/tracebed/emulator/internal/testplane"
	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/topologies"
)

// serveRegistry starts switch tor of top (device id 1) with the programs
// of reg, running program (empty: reg's default), on fake ports, and its P4Runtime
// server on a Unix socket; everything stops when the test ends.
func serveRegistry(t *testing.T, top *topologies.Topology, reg *dataplane.Registry, program string) (*Switch, *wires, string) {
	t.Helper()
	w := &wires{}
	s, err := New(Config{Topology: top, Name: "tor", Programs: reg, Program: program, Open: w.open, DeviceID: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	path := filepath.Join(t.TempDir(), "tor.sock")
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	g := NewGRPCServer()
	NewServer(s).Register(g)
	go g.Serve(lis)
	t.Cleanup(func() { g.Stop(); cancel(); <-done; w.close() })
	return s, w, path
}

// serve starts a switch with fake ports and its P4Runtime server on a Unix
// socket; it returns the socket path.
func serve(t *testing.T) (*Switch, string) {
	t.Helper()
	top := topo(t, topologies.Params{Generate: "star", Hosts: 3})
	s, _ := start(t, top, "tor")
	path := filepath.Join(t.TempDir(), "tor.sock")
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	g := NewGRPCServer()
	NewServer(s).Register(g)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return s, path
}

func dial(t *testing.T, path string, opts p4rt.DialOptions) *p4rt.GRPC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := p4rt.Dial(ctx, path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// route is an INSERT of the test plane's route to 10.9.9.id out of port.
func route(id uint32, port byte) *p4v1.Update {
	return p4rt.Insert(p4rt.Table(&p4v1.TableEntry{TableId: routeTable,
		Match: []*p4v1.FieldMatch{{FieldId: 1, FieldMatchType: &p4v1.FieldMatch_Exact_{Exact: &p4v1.FieldMatch_Exact{Value: []byte{10, 9, 9, byte(id)}}}}},
		Action: &p4v1.TableAction{Type: &p4v1.TableAction_Action{Action: &p4v1.Action{ActionId: 0x01000001,
			Params: []*p4v1.Action_Param{{ParamId: 1, Value: []byte{port}}}}}}}))
}

// routeTable is the id of the test plane's ingress.route.
const routeTable = 0x02000001

// routes reads every entry of the test plane's route table.
var routes = p4rt.Table(&p4v1.TableEntry{TableId: routeTable})

// topoRoutes is the number of routes the test plane of switch tor of
// serve's star (3 hosts) starts with: one per host.
const topoRoutes = 3

func TestArbitration(t *testing.T) {
	_, path := serve(t)
	ctx := context.Background()
	primary := dial(t, path, p4rt.DialOptions{DeviceID: 1, ElectionID: 10})
	if !primary.Primary() {
		t.Fatal("first controller is not primary")
	}
	if err := primary.Write(ctx, route(1, 1)); err != nil {
		t.Fatal(err)
	}
	// A lower election id is a backup and cannot write.
	if _, err := p4rt.Dial(ctx, path, p4rt.DialOptions{DeviceID: 1, ElectionID: 5}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("dial as backup without Backup: %v", err)
	}
	// The refused stream above held id 5 until the server saw it close,
	// which it may not have yet: dial again until it has.
	var backup *p4rt.GRPC
	waitFor(t, func() bool {
		c, err := p4rt.Dial(ctx, path, p4rt.DialOptions{DeviceID: 1, ElectionID: 5, Backup: true})
		backup = c
		return err == nil
	})
	t.Cleanup(func() { backup.Close() })
	if backup.Primary() {
		t.Fatal("lower election id became primary")
	}
	if err := backup.Write(ctx, route(2, 2)); status.Code(err) != codes.PermissionDenied {
		t.Errorf("backup write: %v, want PermissionDenied", err)
	}
	if err := backup.SetPipeline(ctx, testplane.P4Info(), nil, 1); status.Code(err) != codes.PermissionDenied {
		t.Errorf("backup set pipeline: %v, want PermissionDenied", err)
	}
	// Anyone may read.
	if es, err := backup.Read(ctx, routes); err != nil || len(es) != topoRoutes+1 {
		t.Errorf("backup read: %v, %v", es, err)
	}
	// The same election id as another controller is refused.
	if _, err := p4rt.Dial(ctx, path, p4rt.DialOptions{DeviceID: 1, ElectionID: 10, Backup: true}); err == nil {
		t.Error("duplicate election id accepted")
	}
	// The primary leaves: nobody is primary until a controller claims an
	// id at least as high as the highest seen.
	primary.Close()
	waitFor(t, func() bool { return !backup.Primary() })
	if err := backup.Write(ctx, route(2, 2)); status.Code(err) != codes.PermissionDenied {
		t.Errorf("write with no primary: %v", err)
	}
	if err := backup.Arbitrate(ctx, 11); err != nil {
		t.Fatal(err)
	}
	if !backup.Primary() {
		t.Fatal("controller with a new highest id is not primary")
	}
	if err := backup.Write(ctx, route(2, 2)); err != nil {
		t.Errorf("new primary write: %v", err)
	}
	// A write with a stale election id (the old primary's) is refused.
	raw := backup.Raw()
	_, err := raw.Write(ctx, &p4v1.WriteRequest{DeviceId: 1, ElectionId: &p4v1.Uint128{Low: 10}, Updates: []*p4v1.Update{route(3, 3)}})
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("stale election id: %v", err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for range 200 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("condition not reached")
}

func TestPipelineAndErrors(t *testing.T) {
	s, path := serve(t)
	ctx := context.Background()
	c := dial(t, path, p4rt.DialOptions{DeviceID: 1, ElectionID: 1})
	if v, err := c.Capabilities(ctx); err != nil || v != APIVersion {
		t.Errorf("capabilities %q, %v", v, err)
	}
	// The served P4Info is the program's plus the switch counters.
	n, err := c.Names()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.TableID(testplane.TableRoute); err != nil {
		t.Error(err)
	}
	if _, err := n.CounterID("tracebed.port_rx"); err != nil {
		t.Error(err)
	}
	if err := c.Write(ctx, route(1, 1)); err != nil {
		t.Fatal(err)
	}
	// Batch errors come back with the failing update's code.
	err = c.Write(ctx, route(2, 2), route(1, 1), route(3, 3))
	if status.Code(err) != codes.AlreadyExists {
		t.Errorf("batch with a duplicate: %v", err)
	}
	raw := c.Raw()
	id := &p4v1.Uint128{Low: 1}
	for _, tc := range []struct {
		name string
		call func() error
		code codes.Code
	}{
		{"wrong device", func() error {
			_, err := raw.Write(ctx, &p4v1.WriteRequest{DeviceId: 9, ElectionId: id, Updates: []*p4v1.Update{route(5, 1)}})
			return err
		}, codes.NotFound},
		{"nil entity", func() error {
			_, err := raw.Write(ctx, &p4v1.WriteRequest{DeviceId: 1, ElectionId: id, Updates: []*p4v1.Update{{Type: p4v1.Update_INSERT}}})
			return p4rt.UpdateError(err)
		}, codes.InvalidArgument},
		{"atomic batch", func() error {
			_, err := raw.Write(ctx, &p4v1.WriteRequest{DeviceId: 1, ElectionId: id, Atomicity: p4v1.WriteRequest_DATAPLANE_ATOMIC, Updates: []*p4v1.Update{route(5, 1)}})
			return err
		}, codes.Unimplemented},
		{"switch counter write", func() error {
			return c.Write(ctx, &p4v1.Update{Type: p4v1.Update_MODIFY, Entity: &p4v1.Entity{Entity: &p4v1.Entity_CounterEntry{CounterEntry: &p4v1.CounterEntry{CounterId: CounterPortRx, Index: &p4v1.Index{Index: 1}}}}})
		}, codes.PermissionDenied},
		{"empty read", func() error {
			_, err := c.Read(ctx)
			return err
		}, codes.InvalidArgument},
		{"read nil entity", func() error {
			_, err := c.Read(ctx, &p4v1.Entity{})
			return err
		}, codes.InvalidArgument},
		{"no P4Info", func() error {
			_, err := raw.SetForwardingPipelineConfig(ctx, &p4v1.SetForwardingPipelineConfigRequest{DeviceId: 1, ElectionId: id, Action: p4v1.SetForwardingPipelineConfigRequest_VERIFY_AND_COMMIT})
			return err
		}, codes.InvalidArgument},
		{"unknown program", func() error {
			info := testplane.P4Info()
			info.PkgInfo.Name = "nope"
			return c.SetPipeline(ctx, info, nil, 0)
		}, codes.InvalidArgument},
		{"commit without save", func() error { // P4Runtime §14: NOT_FOUND
			_, err := raw.SetForwardingPipelineConfig(ctx, &p4v1.SetForwardingPipelineConfigRequest{DeviceId: 1, ElectionId: id, Action: p4v1.SetForwardingPipelineConfigRequest_COMMIT})
			return err
		}, codes.NotFound},
		{"bad response type", func() error {
			_, err := raw.GetForwardingPipelineConfig(ctx, &p4v1.GetForwardingPipelineConfigRequest{DeviceId: 1, ResponseType: 42})
			return err
		}, codes.InvalidArgument},
	} {
		if got := status.Code(tc.call()); got != tc.code {
			t.Errorf("%s: code %v, want %v", tc.name, got, tc.code)
		}
	}
	// Loading the program again (with the served P4Info, switch counters
	// and all) resets its state.
	if err := c.SetPipeline(ctx, c.P4Info(), nil, 7); err != nil {
		t.Fatal(err)
	}
	es, err := c.Read(ctx, routes)
	if err != nil || len(es) != topoRoutes {
		t.Errorf("after reload: routes %v, %v", es, err)
	}
	resp, err := raw.GetForwardingPipelineConfig(ctx, &p4v1.GetForwardingPipelineConfigRequest{DeviceId: 1, ResponseType: p4v1.GetForwardingPipelineConfigRequest_COOKIE_ONLY})
	if err != nil || resp.GetConfig().GetCookie().GetCookie() != 7 {
		t.Errorf("cookie: %v, %v", resp, err)
	}
	// Switch counters read by name.
	d, err := c.CounterValue(ctx, "tracebed.port_rx", 1)
	if err != nil || d.GetPacketCount() != 0 {
		t.Errorf("port_rx[1] = %v, %v", d, err)
	}
	// The switch survived all of it.
	if _, err := s.Stats(ctx); err != nil {
		t.Error(err)
	}
}

// TestStreamMisuse sends stream messages out of order.
func TestStreamMisuse(t *testing.T) {
	_, path := serve(t)
	conn, err := grpc.NewClient(p4rt.DialTarget(path), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rt := p4v1.NewP4RuntimeClient(conn)
	for _, first := range []*p4v1.StreamMessageRequest{
		{Update: &p4v1.StreamMessageRequest_Packet{Packet: &p4v1.PacketOut{Payload: []byte{1}}}},
		{},
		{Update: &p4v1.StreamMessageRequest_Arbitration{Arbitration: &p4v1.MasterArbitrationUpdate{DeviceId: 77}}},
		{Update: &p4v1.StreamMessageRequest_Arbitration{Arbitration: &p4v1.MasterArbitrationUpdate{DeviceId: 1, Role: &p4v1.Role{Name: "x", Config: nil}, ElectionId: &p4v1.Uint128{}}}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		st, err := rt.StreamChannel(ctx)
		if err != nil {
			t.Fatal(err)
		}
		st.Send(first)
		_, err = st.Recv()
		if first.GetArbitration().GetDeviceId() == 1 {
			// Role "x" with election id 0 is a valid arbitration.
			if err != nil {
				t.Errorf("arbitration for role x: %v", err)
			}
		} else if err == nil || status.Code(err) == codes.OK {
			t.Errorf("stream opened with %v: no error", first)
		}
		cancel()
	}
}

// FuzzServerWrite sends arbitrary WriteRequests as the primary: the server
// answers every one with a status and keeps running, and no status is
// INTERNAL (what a panic in the device becomes).
func FuzzServerWrite(f *testing.F) {
	seed, _ := proto.Marshal(&p4v1.WriteRequest{DeviceId: 1, ElectionId: &p4v1.Uint128{Low: 1}, Updates: []*p4v1.Update{route(1, 1)}})
	f.Add(seed)
	top := topo(f, topologies.Params{Generate: "star", Hosts: 3})
	s, _ := start(f, top, "tor")
	srv := NewServer(s)
	primary := &stream{out: make(chan *p4v1.StreamMessageResponse, 100), election: &p4v1.Uint128{Low: 1}}
	srv.roles[""] = &role{highest: primary.election, primary: primary, streams: map[*stream]bool{primary: true}}
	f.Fuzz(func(t *testing.T, data []byte) {
		var req p4v1.WriteRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		req.DeviceId, req.ElectionId = 1, &p4v1.Uint128{Low: 1}
		_, err := srv.Write(context.Background(), &req)
		noInternal(t, "write", err)
		var rq p4v1.ReadRequest
		if proto.Unmarshal(data, &rq) == nil {
			rq.DeviceId = 1
			err := srv.device(context.Background(), func(d *switchDevice) error {
				for _, e := range rq.GetEntities() {
					d.Read(e, func(*p4v1.Entity) error { return nil })
				}
				return nil
			})
			noInternal(t, "read", err)
		}
		var arb p4v1.MasterArbitrationUpdate
		if proto.Unmarshal(data, &arb) == nil {
			other := NewServer(s) // keeps srv's primary in place
			st := &stream{out: make(chan *p4v1.StreamMessageResponse, 100)}
			other.arbitrate(st, &arb, false)
			other.arbitrate(&stream{out: make(chan *p4v1.StreamMessageResponse, 100)}, &arb, false)
			other.leave(st)
		}
		var info p4configv1.P4Info
		if proto.Unmarshal(data, &info) == nil {
			_, err := srv.SetForwardingPipelineConfig(context.Background(), &p4v1.SetForwardingPipelineConfigRequest{DeviceId: 1, ElectionId: req.ElectionId,
				Action: p4v1.SetForwardingPipelineConfigRequest_VERIFY, Config: &p4v1.ForwardingPipelineConfig{P4Info: &info}})
			noInternal(t, "set pipeline", err)
		}
	})
}

// noInternal fails t if err is an INTERNAL status: what the server makes
// of a panic on the data-plane goroutine, which fuzzing must not hide.
func noInternal(t *testing.T, what string, err error) {
	t.Helper()
	if status.Code(err) == codes.Internal {
		t.Fatalf("%s: %v", what, err)
	}
}

// FuzzServerStream sends arbitrary stream messages (packet-outs, digest
// acknowledgements) as the primary: each packet-out is either injected on
// the CPU port and counted by the pipeline once (forwarded or dropped), or
// refused with a StreamError that is not INTERNAL; never both, never
// neither, never a panic.
func FuzzServerStream(f *testing.F) {
	top := topo(f, topologies.Params{Generate: "star", Hosts: 3})
	for _, m := range []*p4v1.StreamMessageRequest{
		{Update: &p4v1.StreamMessageRequest_Packet{Packet: &p4v1.PacketOut{Payload: udp(top, "h1", "h2", 10),
			Metadata: []*p4v1.PacketMetadata{{MetadataId: 1, Value: []byte{2}}}}}},
		{Update: &p4v1.StreamMessageRequest_Packet{Packet: &p4v1.PacketOut{Payload: []byte{1}}}},
		{Update: &p4v1.StreamMessageRequest_DigestAck{DigestAck: &p4v1.DigestListAck{DigestId: 1, ListId: 1}}},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	s, _ := start(f, top, "tor")
	srv := NewServer(s)
	primary := &stream{out: make(chan *p4v1.StreamMessageResponse, streamBuffer), election: &p4v1.Uint128{Low: 1}}
	srv.roles[""] = &role{highest: primary.election, primary: primary, streams: map[*stream]bool{primary: true}}
	ctx := context.Background()
	// counted reads, on the data-plane goroutine, the frames the pipeline
	// counted and the panics the switch caught.
	counted := func(t *testing.T) (n, panics uint64) {
		err := srv.onSwitch(ctx, func() error {
			fp := s.pipeline.(*testplane.Plane)
			n, panics = fp.Forwarded, s.panics
			for _, d := range fp.Drops {
				n += d
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return n, panics
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var req p4v1.StreamMessageRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		for len(primary.out) > 0 {
			<-primary.out // packet-ins and errors of earlier inputs
		}
		before, _ := counted(t)
		switch m := req.GetUpdate().(type) {
		case *p4v1.StreamMessageRequest_Packet:
			srv.packetOut(ctx, primary, m.Packet, &req)
		case *p4v1.StreamMessageRequest_DigestAck:
			srv.digestAck(ctx, primary, m.DigestAck, &req)
		default:
			return
		}
		var refused *p4v1.StreamError
		for len(primary.out) > 0 {
			if e := (<-primary.out).GetError(); e != nil {
				if codes.Code(e.GetCanonicalCode()) == codes.Internal {
					t.Fatalf("stream error INTERNAL: %s", e.GetMessage())
				}
				refused = e
			}
		}
		after, panics := counted(t)
		if panics != 0 {
			t.Fatalf("the pipeline panicked")
		}
		if req.GetPacket() == nil {
			return
		}
		n := after - before
		if refused != nil && n != 0 || refused == nil && n != 1 {
			t.Fatalf("packet-out refused (%v) and counted %d times", refused, n)
		}
	})
}

// mirror is a test program: it sends every frame back out of the port it
// came in on, and counts them.
type mirror struct{ frames int64 }

func (m *mirror) Process(_ time.Duration, in int, f []byte, out emulator.Emitter) {
	m.frames++
	out.Emit(in, 0, f)
}

func (m *mirror) P4Info() *p4configv1.P4Info { return mirrorInfo() }

func (m *mirror) Write([]*p4v1.Update) error {
	return status.Error(codes.Unimplemented, "mirror has no entities")
}

func (m *mirror) Read(q *p4v1.Entity, yield func(*p4v1.Entity) error) error {
	if c := q.GetCounterEntry(); c != nil && c.GetCounterId() == 0x12000099 {
		return yield(&p4v1.Entity{Entity: &p4v1.Entity_CounterEntry{CounterEntry: &p4v1.CounterEntry{
			CounterId: 0x12000099, Index: &p4v1.Index{}, Data: &p4v1.CounterData{PacketCount: m.frames}}}})
	}
	return status.Error(codes.NotFound, "mirror has one counter")
}

func mirrorInfo() *p4configv1.P4Info {
	return &p4configv1.P4Info{PkgInfo: &p4configv1.PkgInfo{Name: "mirror"}, Counters: []*p4configv1.Counter{{
		Preamble: &p4configv1.Preamble{Id: 0x12000099, Name: "mirrored"}, Spec: &p4configv1.CounterSpec{Unit: p4configv1.CounterSpec_PACKETS}, Size: 1}}}
}

// TestSelectProgram loads another program over P4Runtime by its P4Info:
// frames then follow it.
func TestSelectProgram(t *testing.T) {
	top := topo(t, topologies.Params{Generate: "star", Hosts: 3})
	reg, err := dataplane.NewRegistry(testplane.Program(), dataplane.Program{Name: "mirror", P4Info: mirrorInfo(),
		New: func(*topologies.Node, topologies.RouteTable) (dataplane.Dataplane, error) { return &mirror{}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	_, w, path := serveRegistry(t, top, reg, "")
	ctx := context.Background()
	c := dial(t, path, p4rt.DialOptions{DeviceID: 1, ElectionID: 1})
	if err := c.SetPipeline(ctx, mirrorInfo(), nil, 2); err != nil {
		t.Fatal(err)
	}
	if name := c.P4Info().GetPkgInfo().GetName(); name != "mirror" {
		t.Fatalf("running %q after loading mirror", name)
	}
	w.send(t, 2, udp(top, "h2", "h1", 10))
	if _, ok := w.recv(t, 2, time.Second); !ok {
		t.Fatal("mirror did not send the frame back on port 2")
	}
	d, err := c.CounterValue(ctx, "mirrored", 0)
	if err != nil || d.GetPacketCount() != 1 {
		t.Errorf("mirrored = %v, %v", d, err)
	}
	// And back to forwarding.
	if err := c.SetPipeline(ctx, testplane.P4Info(), nil, 3); err != nil {
		t.Fatal(err)
	}
	w.send(t, 2, udp(top, "h2", "h1", 10))
	if _, ok := w.recv(t, 1, time.Second); !ok {
		t.Fatal("the test plane did not forward to port 1")
	}
}
