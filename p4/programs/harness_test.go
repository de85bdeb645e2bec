package programs_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tracebed/tracebed/emulator/bmv2"
	"github.com/tracebed/tracebed/emulator/dataplane"
	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/p4/programs"
	"github.com/tracebed/tracebed/topologies"
)

// The harness of the conformance test: a target is one program on one
// kind of switch — its Go twin in process (the sim substrate's Device), the
// Go switch over P4Runtime gRPC, or bmv2's simple_switch_grpc where it is
// installed — and each row gets a fresh pipeline on it.

// target is one program on one kind of switch.
type target struct {
	name, prog, kind string // kind: local, goswitch, bmv2
	fix              *fixture
	top              *topologies.Topology
	node             *topologies.Node
	reg              *dataplane.Registry

	// gRPC targets.
	sock      string
	deviceID  uint64
	info      *p4configv1.P4Info
	devConfig []byte
	wires     *wires // the Go switch's ports (nil for bmv2)
	election  uint64 // the last election id used: each row takes a higher one
}

// harness is what a row sees: a fresh pipeline and a client of it.
type harness struct {
	t   *testing.T
	tg  *target
	ctx context.Context
	c   p4rt.Client
	n   *p4rt.Names
	g   *p4rt.GRPC           // gRPC targets
	raw p4v1.P4RuntimeClient // gRPC targets
	id  *p4v1.Uint128        // this row's election id
}

// conformanceTopology is a star of three hosts whose switch has 16
// aggregators (for ina).
func conformanceTopology(t testing.TB) *topologies.Topology {
	t.Helper()
	f, err := topologies.Generate(topologies.Params{Generate: "star", Hosts: 3, Aggregators: 16})
	if err != nil {
		t.Fatal(err)
	}
	top, err := f.Build("conformance")
	if err != nil {
		t.Fatal(err)
	}
	return top
}

// targets returns every target to run the rows on: each program as a
// local Device and on the Go switch, and on bmv2 when it is installed (if
// not, skip says why).
func targets(t *testing.T) (out []*target, skip string) {
	top := conformanceTopology(t)
	reg, err := programs.Registry()
	if err != nil {
		t.Fatal(err)
	}
	node := top.Switches()[0]
	for _, name := range reg.Names() {
		fix := fixtures[name]
		if fix == nil {
			t.Fatalf("program %s has no conformance fixture (p4/programs/fixtures_test.go)", name)
		}
		out = append(out, &target{name: name + "/local", prog: name, kind: "local", fix: fix, top: top, node: node, reg: reg})
		out = append(out, goSwitchTargets(t, top, node, reg, name, fix)...)
	}
	b, skip := bmv2Targets(t, top, node, reg)
	return append(out, b...), skip
}

// bmv2Targets starts simple_switch_grpc (no ports: P4Runtime only) for
// each program p4c-bm2-ss compiles, when both are installed.
func bmv2Targets(t *testing.T, top *topologies.Topology, node *topologies.Node, reg *dataplane.Registry) (out []*target, skip string) {
	tools, err := bmv2.FindTools(bmv2.Options{})
	if err != nil {
		return nil, "simple_switch_grpc and p4c-bm2-ss are not both installed: " + strings.SplitN(err.Error(), "\n", 2)[0]
	}
	for _, name := range reg.Names() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		prog, err := bmv2.Compile(ctx, reg.Lookup(name), bmv2.Options{})
		cancel()
		if err != nil {
			t.Errorf("bmv2: compile %s: %v", name, err)
			continue
		}
		sock := filepath.Join(t.TempDir(), name+".bmv2.sock")
		thrift, err := bmv2.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(tools.Switch, "--device-id", "0", "--thrift-port", strconv.Itoa(thrift), "--no-p4", "--log-level", "warn",
			"--", "--grpc-server-addr", "unix:"+sock, "--cpu-port", "510")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatalf("start %s: %v", tools.Switch, err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		for i := 0; i < 100; i++ {
			if _, err := os.Stat(sock); err == nil {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		out = append(out, &target{name: name + "/bmv2", prog: name, kind: "bmv2", fix: fixtures[name], top: top, node: node, reg: reg,
			sock: sock, deviceID: 0, info: prog.P4Info, devConfig: prog.JSON, election: 10})
	}
	return out, ""
}

// open gives a row a fresh pipeline: a new Go twin for local targets, a
// VERIFY_AND_COMMIT of the program (fresh state) for the others.
func (tg *target) open(t *testing.T) *harness {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	h := &harness{t: t, tg: tg, ctx: ctx}
	if tg.kind == "local" {
		dp, err := tg.reg.Lookup(tg.prog).New(tg.node, tg.top.Routes()[tg.node.Name])
		if err != nil {
			t.Fatal(err)
		}
		h.c = p4rt.Local(dp)
	} else {
		tg.election += 10
		g := tg.dial(t, tg.election, false)
		if err := g.SetPipeline(ctx, tg.info, tg.devConfig, 1); err != nil {
			t.Fatal(err)
		}
		h.c, h.g, h.raw = g, g, g.Raw()
		h.id = &p4v1.Uint128{Low: tg.election}
	}
	n, err := p4rt.NewNames(h.c.P4Info())
	if err != nil {
		t.Fatal(err)
	}
	h.n = n
	return h
}

// dial connects a controller with the given election id.
func (tg *target) dial(t *testing.T, election uint64, backup bool) *p4rt.GRPC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g, err := p4rt.Dial(ctx, tg.sock, p4rt.DialOptions{DeviceID: tg.deviceID, ElectionID: election, Backup: backup})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

func (h *harness) write(us ...*p4v1.Update) error { return h.c.Write(h.ctx, us...) }

func (h *harness) read(qs ...*p4v1.Entity) ([]*p4v1.Entity, error) { return h.c.Read(h.ctx, qs...) }

// must fails the row on an error.
func (h *harness) must(err error) {
	h.t.Helper()
	if err != nil {
		h.t.Fatal(err)
	}
}

// entry is the fixture's i-th insertable table entry.
func (h *harness) entry(i int) *p4v1.TableEntry {
	h.t.Helper()
	te, err := h.tg.fix.entry(h.n, i)
	if err != nil {
		h.t.Fatal(err)
	}
	return te
}

// wantCode checks an error's gRPC code.
func wantCode(t *testing.T, what string, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Errorf("%s: %v (%v), want %v", what, got, err, want)
	}
}

// batchOf returns a batch error, failing the row if err is not one.
func batchOf(t *testing.T, err error) *p4rt.BatchError {
	t.Helper()
	var be *p4rt.BatchError
	if !errors.As(err, &be) {
		t.Fatalf("want a batch error, got %v", err)
	}
	return be
}
