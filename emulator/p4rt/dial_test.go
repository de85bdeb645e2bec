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
