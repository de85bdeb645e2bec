package freeina

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/protobuf/encoding/prototext"

	"github.com/tracebed/tracebed/emulator/bmv2/usefiles"
	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/p4/fwd"
)

// TestVectorsBMv2 runs freeina.p4 on bmv2 against the packet vectors: it
// compiles the program with p4c-bm2-ss, checks that p4c's P4Info has every
// object of the Go twin's by name (same kinds, widths and sizes), then, for
// each vector file, starts simple_switch_grpc on pcap files (--use-files),
// programs it through P4Runtime with the controller code the Go twin uses
// (routes, rings, bindings), and compares every port's output with the
// vectors from the EtherType on (fwd.p4, whose forwarding freeina.p4
// keeps, leaves Ethernet addresses to a table it does not have; the
// replicas' addresses come from freeina_replicas on both).
//
// It needs p4c-bm2-ss and simple_switch_grpc on PATH and skips otherwise.
func TestVectorsBMv2(t *testing.T) {
	for _, tool := range []string{"simple_switch_grpc", "p4c-bm2-ss"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not on PATH: install p4lang/p4c and p4lang/behavioral-model (with P4Runtime) to run freeina.p4 against the packet vectors", tool)
		}
	}
	dir := t.TempDir()
	jsonPath, infoPath := filepath.Join(dir, "freeina.json"), filepath.Join(dir, "freeina.p4info.txtpb")
	cmd := exec.Command("p4c-bm2-ss", "--arch", "v1model", "-o", jsonPath, "--p4runtime-files", infoPath, "freeina.p4")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("p4c-bm2-ss freeina.p4: %v\n%s", err, out)
	}
	txt, err := os.ReadFile(infoPath)
	if err != nil {
		t.Fatal(err)
	}
	info := &p4configv1.P4Info{}
	if err := prototext.Unmarshal(txt, info); err != nil {
		t.Fatalf("%s: %v", infoPath, err)
	}
	want, err := P4Info(sourceConfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := p4rt.SameObjects(want, info); err != nil {
		t.Fatalf("p4c's P4Info and the Go twin's differ: %v", err)
	}
	config, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join("testdata", "vectors", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range files {
		v := readVectorFile(t, path)
		t.Run(v.Name, func(t *testing.T) { runBMv2(t, v, info, config) })
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// runBMv2 replays one vector file on simple_switch_grpc.
func runBMv2(t *testing.T, v *vectorFile, info *p4configv1.P4Info, config []byte) {
	dir := t.TempDir()
	ports := v.Hosts
	var frames []usefiles.Frame
	for _, st := range v.Steps {
		b, err := hex.DecodeString(st.In)
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, usefiles.Frame{Port: st.InPort, Data: b})
	}
	// One frame per step, 20 ms apart: bmv2 reads every port's file in
	// timestamp order.
	if err := usefiles.WriteInputs(dir, ports, frames, 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	const wait = 4 // seconds bmv2 waits before reading the pcaps: time to program it
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	args := []string{"--device-id", "0", "--use-files", fmt.Sprint(wait), "--log-console", "-L", "warn"}
	args = append(args, usefiles.Args(ports)...)
	args = append(args, "--no-p4", "--", "--grpc-server-addr", addr)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sw := exec.CommandContext(ctx, "simple_switch_grpc", args...)
	sw.Dir = dir
	var log strings.Builder
	sw.Stdout, sw.Stderr = &log, &log
	if err := sw.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			_ = sw.Process.Kill()
			_ = sw.Wait()
		}
	}
	defer stop()
	var client *p4rt.GRPC
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if client, err = p4rt.Dial(ctx, addr, p4rt.DialOptions{DeviceID: 0}); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("%v\nsimple_switch_grpc log:\n%s", err, log.String())
	}
	defer client.Close()
	if err := client.SetPipeline(ctx, info, config, 1); err != nil {
		t.Fatalf("set pipeline: %v\nsimple_switch_grpc log:\n%s", err, log.String())
	}
	ctl, err := NewController(client)
	if err != nil {
		t.Fatal(err)
	}
	top := starTopology(t, v.Hosts)
	routes, err := fwd.RouteUpdates(ctl.Names(), top, "tor", p4v1.Update_INSERT)
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Write(ctx, routes...); err != nil {
		t.Fatalf("routes: %v", err)
	}
	for _, r := range v.Rings {
		if err := ctl.AddRing(ctx, top, "tor", r.ring(top)); err != nil {
			t.Fatalf("ring of job %d: %v", r.Job, err)
		}
	}
	for _, b := range v.Binds {
		if err := ctl.Bind(ctx, b.binding(), b.PSN); err != nil {
			t.Fatalf("binding of job %d: %v", b.Job, err)
		}
	}
	time.Sleep(time.Duration(wait)*time.Second + time.Duration(len(v.Steps))*20*time.Millisecond + 2*time.Second)
	stop()
	outputs, err := usefiles.ReadOutputs(dir, ports)
	if err != nil {
		t.Fatalf("%v\nsimple_switch_grpc log:\n%s", err, log.String())
	}
	for p := 1; p <= ports; p++ {
		var want, got []string
		for _, st := range v.Steps {
			for _, o := range st.Out {
				if o.Port == p {
					want = append(want, o.Frame[24:]) // from the EtherType on
				}
			}
		}
		for _, b := range outputs[p] {
			got = append(got, hex.EncodeToString(b[12:]))
		}
		if !slices.Equal(got, want) {
			t.Errorf("port %d: bmv2 sent %d frames, the vectors want %d\n got %v\nwant %v", p, len(got), len(want), got, want)
		}
	}
}
