//go:build linux && !nonetns

package programs_test

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tracebed/tracebed/emulator/dataplane"
	goswitch "github.com/tracebed/tracebed/emulator/switch"
	"github.com/tracebed/tracebed/topologies"
)

// goSwitchTargets starts a Go switch with device id 0 running prog, its
// ports socket pairs and its P4Runtime server on a Unix socket.
func goSwitchTargets(t *testing.T, top *topologies.Topology, node *topologies.Node, reg *dataplane.Registry, prog string, fix *fixture) []*target {
	w := &wires{}
	sw, err := goswitch.New(goswitch.Config{Topology: top, Name: node.Name, Programs: reg, Program: prog, DeviceID: 0, Open: w.open})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sw.Run(ctx) }()
	sock := filepath.Join(t.TempDir(), prog+".sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	g := goswitch.NewGRPCServer()
	goswitch.NewServer(sw).Register(g)
	go g.Serve(lis)
	t.Cleanup(func() {
		g.Stop()
		cancel()
		<-done
		w.close()
	})
	return []*target{{name: prog + "/goswitch", prog: prog, kind: "goswitch", fix: fix, top: top, node: node, reg: reg,
		sock: sock, deviceID: 0, info: reg.Lookup(prog).P4Info, wires: w, election: 10}}
}

// wires are a Go switch's ports as Unix datagram socket pairs: the test
// writes and reads frames at the far ends.
type wires struct{ far []int }

func (w *wires) open(p *topologies.Port) (goswitch.PortIO, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	for len(w.far) <= p.Num {
		w.far = append(w.far, -1)
	}
	w.far[p.Num] = fds[1]
	return goswitch.NewSocketIO(fds[0], goswitch.Batch), nil
}

func (w *wires) close() {
	for _, fd := range w.far {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

func (w *wires) send(t *testing.T, port int, f []byte) {
	t.Helper()
	if _, err := unix.Write(w.far[port], f); err != nil {
		t.Fatal(err)
	}
}

// recv returns the next frame that left port, or false after d.
func (w *wires) recv(port int, d time.Duration) ([]byte, bool) {
	deadline := time.Now().Add(d)
	buf := make([]byte, 9216)
	for time.Now().Before(deadline) {
		n, err := unix.Read(w.far[port], buf)
		if err == nil {
			return buf[:n], true
		}
		time.Sleep(2 * time.Millisecond)
	}
	return nil, false
}

// drain discards the frames waiting on every port.
func (w *wires) drain() {
	buf := make([]byte, 9216)
	for _, fd := range w.far {
		for fd >= 0 {
			if _, err := unix.Read(fd, buf); err != nil {
				break
			}
		}
	}
}
