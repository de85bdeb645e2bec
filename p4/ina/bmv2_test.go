package ina

import (
	"context"
	"encoding/hex"
	"errors"
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
	"google.golang.org/protobuf/encoding/prototext"

	"github.com/tracebed/tracebed/emulator/bmv2/usefiles"
	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/internal/testproc"
)

// TestVectorsBMv2 runs ina.p4 on bmv2 against the packet vectors: it
// compiles the program with p4c-bm2-ss, checks that p4c's P4Info has every
// object of the Go twin's by name (same kinds, widths and sizes), then, for
// each vector file, starts simple_switch_grpc on pcap files (--use-files),
// programs it through P4Runtime with the same controller code the Go twin
// uses, and compares every port's output with the vectors.
//
// It needs p4c-bm2-ss and simple_switch_grpc on PATH (p4lang/p4c and
// p4lang/behavioral-model built with P4Runtime support) and skips otherwise.
func TestVectorsBMv2(t *testing.T) {
	for _, tool := range []string{"simple_switch_grpc", "p4c-bm2-ss"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not on PATH: install p4lang/p4c and p4lang/behavioral-model (with P4Runtime) to run ina.p4 against the packet vectors", tool)
		}
	}
	dir := t.TempDir()
	jsonPath, infoPath := filepath.Join(dir, "ina.json"), filepath.Join(dir, "ina.p4info.txtpb")
	cmd := testproc.Command(t, "p4c-bm2-ss", "--arch", "v1model", "-o", jsonPath, "--p4runtime-files", infoPath, "ina.p4")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("p4c-bm2-ss ina.p4: %v\n%s", err, out)
	}
	txt, err := os.ReadFile(infoPath)
	if err != nil {
		t.Fatal(err)
	}
	info := &p4configv1.P4Info{}
	if err := prototext.Unmarshal(txt, info); err != nil {
		t.Fatalf("%s: %v", infoPath, err)
	}
	if err := sameObjects(info); err != nil {
		t.Fatalf("p4c's P4Info and the Go twin's differ: %v", err)
	}
	config, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range loadVectors(t) {
		t.Run(v.Name, func(t *testing.T) { runBMv2(t, v, info, config) })
	}
}

// sameObjects checks that info (from p4c) has every table, action,
// register and counter of the Go twin's P4Info with the same shape.
func sameObjects(info *p4configv1.P4Info) error {
	goInfo, err := P4Info(Config{K: DefaultK, Aggregators: 8192})
	if err != nil {
		return err
	}
	them, err := p4rt.NewNames(info)
	if err != nil {
		return err
	}
	var errs []error
	for _, a := range goInfo.GetActions() {
		b, err := them.Action(a.GetPreamble().GetName())
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, p := range a.GetParams() {
			q, err := them.Param(a.GetPreamble().GetName(), p.GetName())
			if err != nil || q.GetBitwidth() != p.GetBitwidth() {
				errs = append(errs, fmt.Errorf("action %s param %s: %v (width %d, want %d)", a.GetPreamble().GetName(), p.GetName(), err, q.GetBitwidth(), p.GetBitwidth()))
			}
		}
		if len(b.GetParams()) != len(a.GetParams()) {
			errs = append(errs, fmt.Errorf("action %s has %d params, want %d", a.GetPreamble().GetName(), len(b.GetParams()), len(a.GetParams())))
		}
	}
	for _, tb := range goInfo.GetTables() {
		name := tb.GetPreamble().GetName()
		if _, err := them.Table(name); err != nil {
			errs = append(errs, err)
			continue
		}
		for _, mf := range tb.GetMatchFields() {
			m, err := them.MatchField(name, mf.GetName())
			if err != nil || m.GetBitwidth() != mf.GetBitwidth() || m.GetMatchType() != mf.GetMatchType() {
				errs = append(errs, fmt.Errorf("table %s field %s: %v (%v/%d, want %v/%d)", name, mf.GetName(), err, m.GetMatchType(), m.GetBitwidth(), mf.GetMatchType(), mf.GetBitwidth()))
			}
		}
	}
	for _, r := range goInfo.GetRegisters() {
		q, err := them.Register(r.GetPreamble().GetName())
		if err != nil || q.GetSize() != r.GetSize() || p4rt.RegisterWidth(q) != p4rt.RegisterWidth(r) {
			errs = append(errs, fmt.Errorf("register %s: %v (size %d width %d, want %d, %d)", r.GetPreamble().GetName(), err, q.GetSize(), p4rt.RegisterWidth(q), r.GetSize(), p4rt.RegisterWidth(r)))
		}
	}
	for _, c := range goInfo.GetCounters() {
		q, err := them.Counter(c.GetPreamble().GetName())
		if err != nil || q.GetSize() != c.GetSize() || q.GetSpec().GetUnit() != c.GetSpec().GetUnit() {
			errs = append(errs, fmt.Errorf("counter %s: %v", c.GetPreamble().GetName(), err))
		}
	}
	return errors.Join(errs...)
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
	// One packet per step, 20 ms apart: bmv2 reads every port's file in
	// timestamp order.
	var frames []usefiles.Frame
	for _, st := range v.Steps {
		b, err := hex.DecodeString(st.In)
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, usefiles.Frame{Port: st.InPort, Data: b})
	}
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
	client, err := dialBMv2(ctx, addr)
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
	top, err := vectorTopology(v.Hosts)
	if err != nil {
		t.Fatal(err)
	}
	ups, err := v.program(top, ctl)
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Write(ctx, ups...); err != nil {
		t.Fatalf("programming bmv2: %v", err)
	}
	// Wait until bmv2 has replayed every packet (plus a margin), read its
	// frame accounting (every frame in exactly one counter), then stop it
	// so that the output pcaps are complete.
	time.Sleep(time.Duration(wait)*time.Second + time.Duration(len(v.Steps))*20*time.Millisecond + 2*time.Second)
	if fc, err := ctl.FrameCounts(ctx); err != nil {
		t.Errorf("reading bmv2's counters: %v", err)
	} else if fc.Total() != uint64(len(v.Steps)) {
		t.Errorf("%d frames in, bmv2's counters account for %d: %+v", len(v.Steps), fc.Total(), fc)
	}
	stop()
	outputs, err := usefiles.ReadOutputs(dir, ports)
	if err != nil {
		t.Fatalf("%v\nsimple_switch_grpc log:\n%s", err, log.String())
	}
	for p := 1; p <= ports; p++ {
		var want []string
		for _, st := range v.Steps {
			for _, o := range st.Out {
				if o.Port == p {
					want = append(want, o.Frame)
				}
			}
		}
		var got []string
		for _, b := range outputs[p] {
			got = append(got, hex.EncodeToString(b))
		}
		if !slices.Equal(got, want) {
			t.Errorf("port %d: bmv2 sent %d frames, the vectors want %d\n got %v\nwant %v", p, len(got), len(want), got, want)
		}
	}
}

// dialBMv2 connects to simple_switch_grpc as primary controller, retrying
// while its server starts. bmv2 started with --no-p4 has no pipeline yet,
// which p4rt.Dial accepts.
func dialBMv2(ctx context.Context, addr string) (*p4rt.GRPC, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := p4rt.Dial(ctx, addr, p4rt.DialOptions{DeviceID: 0})
		if err == nil || time.Now().After(deadline) {
			return c, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestSameObjects checks the P4Info comparison the bmv2 test relies on.
func TestSameObjects(t *testing.T) {
	info, err := P4Info(Config{K: DefaultK, Aggregators: 8192})
	if err != nil {
		t.Fatal(err)
	}
	if err := sameObjects(info); err != nil {
		t.Fatalf("the Go P4Info differs from itself: %v", err)
	}
	info.Registers[0].Size = 10
	info.Actions[0].Params[1].Bitwidth = 16
	info.Tables = info.Tables[1:]
	err = sameObjects(info)
	for _, want := range []string{"agg_bitmap", "param gen", "no table named \"InaIngress.jobs\""} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not mention %q", err, want)
		}
	}
}
