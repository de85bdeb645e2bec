package bmv2

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tracebed/tracebed/emulator/bmv2/usefiles"
	"github.com/tracebed/tracebed/emulator/p4rt"
)

// Replay is one run of a compiled program on simple_switch_grpc reading its
// ports from pcap files (--use-files): the packet-vector tests of every P4
// program run their frames through bmv2 this way, programmed over
// P4Runtime by tracebed's own client, with no network namespace and no
// root.
type Replay struct {
	// Program is the compiled program (Compile) pushed to the switch.
	Program *Program
	// Ports are the switch's ports, numbered 1 to Ports.
	Ports int
	// Frames arrive in order, Gap apart (simple_switch reads all the
	// ports' files in timestamp order); zero Gap means 10 ms.
	Frames []usefiles.Frame
	Gap    time.Duration
	// Setup installs the entries the frames need, through c (primary
	// controller, the pipeline pushed).
	Setup func(ctx context.Context, c *p4rt.GRPC) error
	// Done, if set, reports whether the switch has handled every frame
	// (from its counters, say); it is polled once the frames are due,
	// and the run ends once it is true. Without it the run waits a fixed
	// margin after the last frame.
	Done func(ctx context.Context, c *p4rt.GRPC) (bool, error)
	// Check, if set, runs once the frames are handled, before the
	// switch stops (to read counters, say).
	Check func(ctx context.Context, c *p4rt.GRPC) error
	// PriorityQueues passes --priority-queues (0: leave it off).
	PriorityQueues int
	// Switch is simple_switch_grpc's path; empty looks it up on PATH.
	Switch string
	// Dir is where the pcap files go; empty means a new temporary
	// directory, removed after the run.
	Dir string
}

// Run replays r.Frames and returns the frames each port sent, by port.
// Its error carries the end of the switch's log.
func (r *Replay) Run(ctx context.Context) (map[int][][]byte, error) {
	sw := r.Switch
	if sw == "" {
		var err error
		if sw, err = exec.LookPath(SwitchTool); err != nil {
			return nil, fmt.Errorf("bmv2: %s is not on PATH.\n%s", SwitchTool, Install)
		}
	}
	dir := r.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "tracebed-bmv2-replay-")
		if err != nil {
			return nil, fmt.Errorf("bmv2: %w", err)
		}
		defer os.RemoveAll(d)
		dir = d
	}
	gap := r.Gap
	if gap == 0 {
		gap = 10 * time.Millisecond
	}
	// The inputs are named pipes (pipedInputs): the frames wait for the
	// program and its entries, however long pushing them takes.
	in, err := newPipedInputs(dir, r.Ports, r.Frames, gap)
	if err != nil {
		return nil, fmt.Errorf("bmv2: input pcaps: %w", err)
	}
	defer in.Close()
	sock := filepath.Join(dir, "p4rt.sock")
	// Its own thrift port: simple_switch_grpc also serves thrift, on 9090
	// unless told, and a second switch in the namespace could not bind.
	thrift, err := FreePort()
	if err != nil {
		return nil, fmt.Errorf("bmv2: %w", err)
	}
	args := []string{"--device-id", "0", "--use-files", "0", "--thrift-port", strconv.Itoa(thrift), "--log-console", "-L", "warn"}
	args = append(args, usefiles.Args(r.Ports)...)
	args = append(args, "--no-p4", "--", "--grpc-server-addr", "unix:"+sock)
	if r.PriorityQueues > 0 {
		args = append(args, "--priority-queues", strconv.Itoa(r.PriorityQueues))
	}
	cmd := exec.Command(sw, args...)
	cmd.Dir = dir
	log := &tailBuffer{max: 16 << 10}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bmv2: start %s: %w", sw, err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	defer func() {
		cmd.Process.Kill()
		<-exited
	}()
	fail := func(err error) (map[int][][]byte, error) {
		return nil, fmt.Errorf("bmv2: %s %s: %w\nits log ends:\n%s", SwitchTool, strings.Join(args, " "), err, log.String())
	}
	c, err := dialRetry(ctx, sock, exited)
	if err != nil {
		return fail(err)
	}
	defer c.Close()
	if err := c.SetPipeline(ctx, r.Program.P4Info, r.Program.JSON, 1); err != nil {
		return fail(fmt.Errorf("set pipeline: %w", err))
	}
	if r.Setup != nil {
		if err := r.Setup(ctx, c); err != nil {
			return fail(fmt.Errorf("setup: %w", err))
		}
	}
	// The frames are due from now, gap apart.
	in.Release()
	due := time.Now().Add(time.Duration(len(r.Frames)) * gap)
	if err := sleepUntil(ctx, due.Add(200*time.Millisecond), exited); err != nil {
		return fail(err)
	}
	if r.Done == nil {
		if err := sleepUntil(ctx, time.Now().Add(time.Second), exited); err != nil {
			return fail(err)
		}
	} else {
		deadline := time.Now().Add(30 * time.Second)
		for {
			ok, err := r.Done(ctx, c)
			if err != nil {
				return fail(fmt.Errorf("done: %w", err))
			}
			if ok {
				break
			}
			if time.Now().After(deadline) {
				return fail(errors.New("the switch has not handled every frame 30 s after the last was due"))
			}
			if err := sleepUntil(ctx, time.Now().Add(100*time.Millisecond), exited); err != nil {
				return fail(err)
			}
		}
		// Counted in ingress; give egress and the output files a moment.
		if err := sleepUntil(ctx, time.Now().Add(300*time.Millisecond), exited); err != nil {
			return fail(err)
		}
	}
	if r.Check != nil {
		if err := r.Check(ctx, c); err != nil {
			return fail(fmt.Errorf("check: %w", err))
		}
	}
	out, err := usefiles.ReadOutputs(dir, r.Ports)
	if err != nil {
		return fail(fmt.Errorf("output pcaps: %w", err))
	}
	return out, nil
}

// dialRetry connects to a starting simple_switch_grpc as primary
// controller, retrying while its server comes up.
func dialRetry(ctx context.Context, sock string, exited <-chan struct{}) (*p4rt.GRPC, error) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		c, err := p4rt.Dial(dctx, sock, p4rt.DialOptions{DeviceID: 0})
		cancel()
		if err == nil {
			return c, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("P4Runtime server on %s: %w", sock, err)
		}
		if err := sleepUntil(ctx, time.Now().Add(100*time.Millisecond), exited); err != nil {
			return nil, err
		}
	}
}

// sleepUntil waits until t, failing if ctx ends or the switch exits.
func sleepUntil(ctx context.Context, t time.Time, exited <-chan struct{}) error {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-exited:
		return errors.New("the switch exited")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// FreePort returns a TCP port of the loopback that was free a moment ago,
// for a simple_switch_grpc's thrift server (--thrift-port).
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
