package p4rt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// DialOptions configure Dial.
type DialOptions struct {
	// DeviceID is the switch's P4Runtime device id (the Go switch's
	// default is 1; bmv2's simple_switch_grpc uses 0 unless told).
	DeviceID uint64
	// ElectionID is this controller's election id; the highest connected
	// id is primary. Zero means 1.
	ElectionID uint64
	// Role is the P4Runtime role name; empty is the default role.
	Role string
	// Backup allows Dial to return while another controller is primary
	// (then Write fails with PermissionDenied).
	Backup bool
}

// GRPC is a Client over a P4Runtime gRPC connection: what controllers use on
// the netns substrate, with the Go switch or bmv2's simple_switch_grpc.
// It is safe for concurrent use.
type GRPC struct {
	conn   *grpc.ClientConn
	rt     p4v1.P4RuntimeClient
	opts   DialOptions
	cancel context.CancelFunc
	stream p4v1.P4Runtime_StreamChannelClient

	sendMu   sync.Mutex // stream.Send is not safe for concurrent use
	messages chan *p4v1.StreamMessageResponse

	mu      sync.Mutex
	info    *p4configv1.P4Info
	primary bool
	arbErr  error
	changed chan struct{} // closed and replaced at every arbitration update
	lastID  *p4v1.Uint128 // election id of the last arbitration update
	dropped uint64        // stream messages not read in time
}

// streamBuffer is how many stream messages (packet-ins, digest lists,
// stream errors) wait for the controller before more are dropped.
const streamBuffer = 1024

// DialTarget turns a socket path or address into a gRPC target: a path
// (it starts with '/' or '.') becomes unix://PATH.
func DialTarget(addr string) string {
	if strings.HasPrefix(addr, "/") || strings.HasPrefix(addr, ".") {
		return "unix://" + addr
	}
	return addr
}

// Dial connects to the P4Runtime server at target (a gRPC target, such as
// unix:///run/tracebed/tb-x/tor.sock or 127.0.0.1:9559), opens the stream
// channel, sends this controller's master arbitration update and waits for
// the switch's answer, then fetches the running pipeline's P4Info (nil
// when the switch runs no pipeline yet, as bmv2 started without one). It
// fails if another controller is primary, unless opts.Backup.
func Dial(ctx context.Context, target string, opts DialOptions) (*GRPC, error) {
	if opts.ElectionID == 0 {
		opts.ElectionID = 1
	}
	conn, err := grpc.NewClient(DialTarget(target), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		return nil, fmt.Errorf("p4runtime %s: %w", target, err)
	}
	sctx, cancel := context.WithCancel(context.Background())
	c := &GRPC{conn: conn, rt: p4v1.NewP4RuntimeClient(conn), opts: opts, cancel: cancel, changed: make(chan struct{}),
		messages: make(chan *p4v1.StreamMessageResponse, streamBuffer)}
	stream, err := c.rt.StreamChannel(sctx)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("p4runtime %s: stream: %w", target, err)
	}
	c.stream = stream
	go c.receive()
	if err := c.arbitrate(ctx, opts.ElectionID); err != nil {
		c.Close()
		return nil, fmt.Errorf("p4runtime %s: %w", target, err)
	}
	if err := c.refreshP4Info(ctx); err != nil && status.Code(err) != codes.FailedPrecondition {
		// FAILED_PRECONDITION: the switch runs no program yet (bmv2
		// started with --no-p4); P4Info is nil until SetPipeline.
		c.Close()
		return nil, fmt.Errorf("p4runtime %s: %w", target, err)
	}
	return c, nil
}

func (c *GRPC) electionID() *p4v1.Uint128 { return &p4v1.Uint128{Low: c.opts.ElectionID} }

func (c *GRPC) role() *p4v1.Role {
	if c.opts.Role == "" {
		return nil
	}
	return &p4v1.Role{Name: c.opts.Role}
}

// arbitrate sends a master arbitration update with election id and waits
// for the switch's answer.
func (c *GRPC) arbitrate(ctx context.Context, id uint64) error {
	c.mu.Lock()
	c.opts.ElectionID = id
	wait := c.changed
	c.mu.Unlock()
	err := c.send(&p4v1.StreamMessageRequest{Update: &p4v1.StreamMessageRequest_Arbitration{
		Arbitration: &p4v1.MasterArbitrationUpdate{DeviceId: c.opts.DeviceID, ElectionId: c.electionID(), Role: c.role()}}})
	if err != nil {
		return fmt.Errorf("arbitration: %w", err)
	}
	// The answer is the first update whose election id is at least id:
	// the switch answers with the primary's id, or the highest it has
	// seen when there is no primary (the P4Runtime specification, "Client
	// Arbitration and Controller Replication"), and either is at
	// least the id just sent. An update with a lower id was sent before
	// ours was seen (say, the notice that the old primary left) and is
	// not the answer. A switch that answers otherwise is believed after a
	// grace period.
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	var grace <-chan time.Time
	for answered := false; !answered; {
		select {
		case <-wait:
		case <-grace:
			answered = true
			continue
		case <-ctx.Done():
			return fmt.Errorf("arbitration: no answer: %w", ctx.Err())
		case <-deadline.C:
			return errors.New("arbitration: no answer within 10s")
		}
		c.mu.Lock()
		answered = c.arbErr != nil || c.lastID.GetHigh() > 0 || c.lastID.GetLow() >= id
		wait = c.changed
		c.mu.Unlock()
		if !answered && grace == nil {
			grace = time.After(2 * time.Second)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.arbErr != nil {
		return c.arbErr
	}
	if !c.primary && !c.opts.Backup {
		return status.Errorf(codes.PermissionDenied, "arbitration: another controller is primary for role %q (election id %d is lower)", c.opts.Role, id)
	}
	return nil
}

func (c *GRPC) send(m *p4v1.StreamMessageRequest) error {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	return c.stream.Send(m)
}

// Send sends a stream message: a PacketOut (as the primary) or a
// DigestListAck.
func (c *GRPC) Send(m *p4v1.StreamMessageRequest) error {
	if err := c.send(m); err != nil {
		return fmt.Errorf("p4runtime stream: %w", err)
	}
	return nil
}

// PacketOut sends payload to the switch as a packet-out with the given
// metadata (P4Runtime §16.1): ids and values of the P4Info's packet_out
// header, every field once.
func (c *GRPC) PacketOut(payload []byte, metadata ...*p4v1.PacketMetadata) error {
	return c.Send(&p4v1.StreamMessageRequest{Update: &p4v1.StreamMessageRequest_Packet{
		Packet: &p4v1.PacketOut{Payload: payload, Metadata: metadata}}})
}

// Messages delivers the stream messages other than arbitration updates:
// packet-ins, digest lists and stream errors. Messages the controller does
// not read in time are dropped (Dropped counts them). The channel is
// closed when the stream ends.
func (c *GRPC) Messages() <-chan *p4v1.StreamMessageResponse { return c.messages }

// Dropped returns how many stream messages were dropped because Messages
// was not read in time.
func (c *GRPC) Dropped() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dropped
}

// receive reads the stream: arbitration updates, errors and the messages
// of Messages.
func (c *GRPC) receive() {
	for {
		m, err := c.stream.Recv()
		c.mu.Lock()
		if err != nil {
			c.primary = false
			if err != io.EOF && status.Code(err) != codes.Canceled {
				c.arbErr = fmt.Errorf("stream closed: %w", err)
			} else {
				c.arbErr = errors.New("stream closed")
			}
			close(c.changed)
			c.changed = make(chan struct{})
			c.mu.Unlock()
			close(c.messages)
			return
		}
		if a := m.GetArbitration(); a != nil {
			c.primary = a.GetStatus().GetCode() == int32(codes.OK)
			c.lastID = a.GetElectionId()
			close(c.changed)
			c.changed = make(chan struct{})
		} else {
			select {
			case c.messages <- m:
			default:
				c.dropped++
			}
		}
		c.mu.Unlock()
	}
}

// Primary reports whether this controller is the primary of its role.
func (c *GRPC) Primary() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.primary
}

// Arbitrate sends a new election id (e.g. higher, to take over as primary).
func (c *GRPC) Arbitrate(ctx context.Context, electionID uint64) error {
	return c.arbitrate(ctx, electionID)
}

func (c *GRPC) refreshP4Info(ctx context.Context) error {
	resp, err := c.rt.GetForwardingPipelineConfig(ctx, &p4v1.GetForwardingPipelineConfigRequest{
		DeviceId: c.opts.DeviceID, ResponseType: p4v1.GetForwardingPipelineConfigRequest_P4INFO_AND_COOKIE})
	if err != nil {
		return fmt.Errorf("get pipeline: %w", err)
	}
	c.mu.Lock()
	c.info = resp.GetConfig().GetP4Info()
	c.mu.Unlock()
	return nil
}

// P4Info implements Client: the P4Info of the running pipeline.
func (c *GRPC) P4Info() *p4configv1.P4Info {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.info
}

// Names returns the name lookups of the running pipeline's P4Info.
func (c *GRPC) Names() (*Names, error) { return NewNames(c.P4Info()) }

// SetPipeline pushes a pipeline (VERIFY_AND_COMMIT): info selects the
// program on the Go switch; deviceConfig is the target's binary (bmv2's
// JSON), ignored by the Go switch. The switch's state is reset.
func (c *GRPC) SetPipeline(ctx context.Context, info *p4configv1.P4Info, deviceConfig []byte, cookie uint64) error {
	_, err := c.rt.SetForwardingPipelineConfig(ctx, &p4v1.SetForwardingPipelineConfigRequest{
		DeviceId: c.opts.DeviceID, ElectionId: c.electionID(), Role: c.opts.Role,
		Action: p4v1.SetForwardingPipelineConfigRequest_VERIFY_AND_COMMIT,
		Config: &p4v1.ForwardingPipelineConfig{P4Info: info, P4DeviceConfig: deviceConfig,
			Cookie: &p4v1.ForwardingPipelineConfig_Cookie{Cookie: cookie}},
	})
	if err != nil {
		return fmt.Errorf("set pipeline %s: %w", info.GetPkgInfo().GetName(), err)
	}
	return c.refreshP4Info(ctx)
}

// Write implements Client: one CONTINUE_ON_ERROR WriteRequest. A batch in
// which some updates failed returns a *BatchError (UpdateError).
func (c *GRPC) Write(ctx context.Context, updates ...*p4v1.Update) error {
	_, err := c.rt.Write(ctx, &p4v1.WriteRequest{DeviceId: c.opts.DeviceID, ElectionId: c.electionID(), Role: c.opts.Role,
		Updates: updates, Atomicity: p4v1.WriteRequest_CONTINUE_ON_ERROR})
	return UpdateError(err)
}

// Read implements Client. When some queries fail, the server streams the
// entities of the others and ends with a batch status: Read returns those
// entities and a *BatchError of kind "query".
func (c *GRPC) Read(ctx context.Context, queries ...*p4v1.Entity) ([]*p4v1.Entity, error) {
	stream, err := c.rt.Read(ctx, &p4v1.ReadRequest{DeviceId: c.opts.DeviceID, Entities: queries, Role: c.opts.Role})
	if err != nil {
		return nil, err
	}
	var out []*p4v1.Entity
	for {
		resp, err := stream.Recv()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			if be := batchFromStatus(err, "query"); be != err {
				return out, be
			}
			return nil, err
		}
		out = append(out, resp.GetEntities()...)
	}
}

// Capabilities returns the server's P4Runtime API version.
func (c *GRPC) Capabilities(ctx context.Context) (string, error) {
	resp, err := c.rt.Capabilities(ctx, &p4v1.CapabilitiesRequest{})
	return resp.GetP4RuntimeApiVersion(), err
}

// Raw returns the underlying generated client, for requests this type
// does not wrap.
func (c *GRPC) Raw() p4v1.P4RuntimeClient { return c.rt }

// Close ends the stream (giving up primary) and the connection.
func (c *GRPC) Close() error {
	c.cancel()
	return c.conn.Close()
}

// CounterValue reads one cell of the counter called name.
func (c *GRPC) CounterValue(ctx context.Context, name string, index int64) (*p4v1.CounterData, error) {
	n, err := c.Names()
	if err != nil {
		return nil, err
	}
	q, err := n.CounterQuery(name, index)
	if err != nil {
		return nil, err
	}
	es, err := c.Read(ctx, q)
	if err != nil {
		return nil, err
	}
	if len(es) != 1 {
		return nil, fmt.Errorf("counter %s[%d]: %d entries read", name, index, len(es))
	}
	return proto.Clone(es[0].GetCounterEntry().GetData()).(*p4v1.CounterData), nil
}

var _ Client = (*GRPC)(nil)
