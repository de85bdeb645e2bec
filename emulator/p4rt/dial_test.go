package p4rt

import (
	"context"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
)

// emptySwitch is a P4Runtime server without a pipeline until a controller
// pushes one, as simple_switch_grpc started with --no-p4.
type emptySwitch struct {
	p4v1.UnimplementedP4RuntimeServer
	mu   sync.Mutex
	info *p4configv1.P4Info
}

func (s *emptySwitch) StreamChannel(st p4v1.P4Runtime_StreamChannelServer) error {
	for {
		m, err := st.Recv()
		if err != nil {
			return nil
		}
		if a := m.GetArbitration(); a != nil {
			a.Status = &status.Status{Code: int32(codes.OK)}
			if err := st.Send(&p4v1.StreamMessageResponse{Update: &p4v1.StreamMessageResponse_Arbitration{Arbitration: a}}); err != nil {
				return nil
			}
		}
	}
}

func (s *emptySwitch) GetForwardingPipelineConfig(context.Context, *p4v1.GetForwardingPipelineConfigRequest) (*p4v1.GetForwardingPipelineConfigResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.info == nil {
		return nil, grpcstatus.Error(codes.FailedPrecondition, "No forwarding pipeline config set for this device")
	}
	return &p4v1.GetForwardingPipelineConfigResponse{Config: &p4v1.ForwardingPipelineConfig{P4Info: s.info}}, nil
}

func (s *emptySwitch) SetForwardingPipelineConfig(_ context.Context, r *p4v1.SetForwardingPipelineConfigRequest) (*p4v1.SetForwardingPipelineConfigResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.info = r.GetConfig().GetP4Info()
	return &p4v1.SetForwardingPipelineConfigResponse{}, nil
}

// TestDialWithoutPipeline: a controller connects to a switch that runs no
// program yet, then pushes one.
func TestDialWithoutPipeline(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "sw.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	p4v1.RegisterP4RuntimeServer(g, &emptySwitch{})
	go g.Serve(lis)
	defer g.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, sock, DialOptions{DeviceID: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.P4Info() != nil {
		t.Errorf("P4Info before any pipeline: %v", c.P4Info())
	}
	info := &p4configv1.P4Info{PkgInfo: &p4configv1.PkgInfo{Name: "prog"}}
	if err := c.SetPipeline(ctx, info, []byte("{}"), 1); err != nil {
		t.Fatal(err)
	}
	if got := c.P4Info().GetPkgInfo().GetName(); got != "prog" {
		t.Errorf("P4Info after SetPipeline: %q", got)
	}
}

// arbSwitch answers arbitration updates. With stale set, it first sends a
// notice a lower election id stamped (as a switch does when the old
// primary leaves just before the new id arrives); with zeroID it stamps
// its answers with election id 0 (not as the specification says).
type arbSwitch struct {
	emptySwitch
	stale, zeroID bool
}

func (s *arbSwitch) StreamChannel(st p4v1.P4Runtime_StreamChannelServer) error {
	for {
		m, err := st.Recv()
		if err != nil {
			return nil
		}
		a := m.GetArbitration()
		if a == nil {
			continue
		}
		var out []*p4v1.MasterArbitrationUpdate
		if s.stale && a.GetElectionId().GetLow() > 1 {
			out = append(out, &p4v1.MasterArbitrationUpdate{DeviceId: a.DeviceId,
				ElectionId: &p4v1.Uint128{Low: a.GetElectionId().GetLow() - 1},
				Status:     &status.Status{Code: int32(codes.NotFound)}})
		}
		a.Status = &status.Status{Code: int32(codes.OK)}
		if s.zeroID {
			a.ElectionId = &p4v1.Uint128{}
		}
		out = append(out, a)
		for _, u := range out {
			if err := st.Send(&p4v1.StreamMessageResponse{Update: &p4v1.StreamMessageResponse_Arbitration{Arbitration: u}}); err != nil {
				return nil
			}
		}
	}
}

// TestArbitrateWaitsForItsAnswer: an arbitration update sent before the
// switch saw the new election id is not taken for the answer, and a
// switch that stamps its answers otherwise is still believed.
func TestArbitrateWaitsForItsAnswer(t *testing.T) {
	for _, tc := range []struct {
		name string
		sw   *arbSwitch
	}{
		{"stale notice first", &arbSwitch{stale: true}},
		{"answers stamped 0", &arbSwitch{zeroID: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "sw.sock")
			lis, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			g := grpc.NewServer()
			p4v1.RegisterP4RuntimeServer(g, tc.sw)
			go g.Serve(lis)
			defer g.Stop()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			c, err := Dial(ctx, sock, DialOptions{DeviceID: 1, ElectionID: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for id := uint64(2); id < 4; id++ {
				if err := c.Arbitrate(ctx, id); err != nil {
					t.Fatalf("arbitrate %d: %v", id, err)
				}
				if !c.Primary() {
					t.Fatalf("arbitrate %d: answered OK, but Primary is false", id)
				}
			}
		})
	}
}
