//go:build linux && !nonetns

package goswitch

import (
	"context"
	"testing"
	"time"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/prototext"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/dataplane"
	"github.com/tracebed/tracebed/emulator/internal/testplane"
	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/topologies"
)

// learner is a test program with a digest, as a learning switch has: it
// sends the source MAC of every frame to the controller and drops the
// frame.
type learner struct {
	*p4rt.Target
	learn *p4rt.Digest
}

const learnerInfo = `
pkg_info { name: "learner" }
digests {
  preamble { id: 0x17000001 name: "ingress.learn" alias: "learn" }
  type_spec { bitstring { bit { bitwidth: 48 } } }
}
`

func learnerP4Info() *p4configv1.P4Info {
	info := &p4configv1.P4Info{}
	if err := prototext.Unmarshal([]byte(learnerInfo), info); err != nil {
		panic(err)
	}
	return info
}

func newLearner() (dataplane.Dataplane, error) {
	t, err := p4rt.NewTarget(learnerP4Info())
	if err != nil {
		return nil, err
	}
	d, err := t.Digest("learn")
	if err != nil {
		return nil, err
	}
	return &learner{Target: t, learn: d}, nil
}

func (l *learner) Process(_ time.Duration, _ int, f []byte, _ emulator.Emitter) {
	if len(f) >= 12 {
		l.learn.Send(&p4v1.P4Data{Data: &p4v1.P4Data_Bitstring{Bitstring: p4rt.EncodeUint(p4rt.Uint(f[6:12]))}})
	}
}

// TestDigests: a program's digests reach the primary controller as
// DigestLists once it enables them, duplicates wait for the
// acknowledgement, and an acknowledgement of an unknown digest is a stream
// error.
func TestDigests(t *testing.T) {
	top := topo(t, topologies.Params{Generate: "star", Hosts: 3})
	reg, err := dataplane.NewRegistry(testplane.Program(), dataplane.Program{Name: "learner", P4Info: learnerP4Info(),
		New: func(*topologies.Node, topologies.RouteTable) (dataplane.Dataplane, error) { return newLearner() }})
	if err != nil {
		t.Fatal(err)
	}
	_, w, path := serveRegistry(t, top, reg, "learner")
	ctx := context.Background()
	c := dial(t, path, p4rt.DialOptions{DeviceID: 1, ElectionID: 1})

	f := udp(top, "h1", "h2", 10)
	w.send(t, 1, f) // not enabled yet: no digest
	enable := &p4v1.Entity{Entity: &p4v1.Entity_DigestEntry{DigestEntry: &p4v1.DigestEntry{DigestId: 0x17000001,
		Config: &p4v1.DigestEntry_Config{MaxTimeoutNs: 0, MaxListSize: 1, AckTimeoutNs: int64(time.Minute)}}}}
	if err := c.Write(ctx, p4rt.Insert(enable)); err != nil {
		t.Fatal(err)
	}
	next := func(d time.Duration) *p4v1.StreamMessageResponse {
		select {
		case m := <-c.Messages():
			return m
		case <-time.After(d):
			return nil
		}
	}
	w.send(t, 1, f)
	m := next(2 * time.Second)
	l := m.GetDigest()
	if l == nil || l.GetDigestId() != 0x17000001 || len(l.GetData()) != 1 || p4rt.Uint(l.GetData()[0].GetBitstring()) != p4rt.Uint(f[6:12]) {
		t.Fatalf("first digest: %v", m)
	}
	// Until it is acknowledged, the same source is not sent again.
	w.send(t, 1, f)
	if m := next(300 * time.Millisecond); m != nil {
		t.Fatalf("a duplicate was sent before the ack: %v", m)
	}
	if err := c.Send(&p4v1.StreamMessageRequest{Update: &p4v1.StreamMessageRequest_DigestAck{DigestAck: &p4v1.DigestListAck{DigestId: l.GetDigestId(), ListId: l.GetListId()}}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	w.send(t, 1, f)
	if m := next(2 * time.Second); m.GetDigest() == nil || m.GetDigest().GetListId() == l.GetListId() {
		t.Fatalf("after the ack: %v", m)
	}
	// An ack of a digest the program does not declare.
	if err := c.Send(&p4v1.StreamMessageRequest{Update: &p4v1.StreamMessageRequest_DigestAck{DigestAck: &p4v1.DigestListAck{DigestId: 42}}}); err != nil {
		t.Fatal(err)
	}
	if m := next(2 * time.Second); codes.Code(m.GetError().GetCanonicalCode()) != codes.InvalidArgument || m.GetError().GetDigestListAck() == nil {
		t.Fatalf("ack of an unknown digest: %v", m)
	}
}

// TestPacketInDrops: a frame for the controller with no primary connected
// is counted in tracebed.switch_drops[2].
func TestPacketInDrops(t *testing.T) {
	s, _ := start(t, topo(t, topologies.Params{Generate: "star", Hosts: 3}), "tor")
	ctx := context.Background()
	NewServer(s)
	if err := s.Inject(ctx, 1, []byte{1, 2, 3}); err != nil { // not IPv4: ingress.miss
		t.Fatal(err)
	}
	// Make ingress.miss send to the CPU port, without a controller.
	var err error
	s.Do(ctx, func() {
		d := s.controlDevice()
		n, _ := p4rt.NewNames(d.P4Info())
		tid, _ := n.TableID(testplane.TableMiss)
		aid, _ := n.ActionID(testplane.ActionToCPU)
		err = d.Write([]*p4v1.Update{p4rt.Modify(p4rt.Table(&p4v1.TableEntry{TableId: tid, IsDefaultAction: true,
			Action: &p4v1.TableAction{Type: &p4v1.TableAction_Action{Action: &p4v1.Action{ActionId: aid}}}}))})
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Inject(ctx, 1, []byte{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	var drops int64
	s.Do(ctx, func() { drops = (&switchDevice{s, s.device}).counter(CounterSwitch, 2).GetPacketCount() })
	if drops != 1 {
		t.Errorf("switch_drops[2] = %d, want 1", drops)
	}
}
