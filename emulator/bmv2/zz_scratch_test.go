package bmv2

import (
	"context"
	"os"
	"testing"
	"time"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	"google.golang.org/protobuf/encoding/prototext"

	"github.com/tracebed/tracebed/emulator/bmv2/usefiles"
)

func TestZZReplay(t *testing.T) {
	d := "/opt/src/behavioral-model/targets/simple_switch_grpc/tests/testdata/"
	js, _ := os.ReadFile(d + "loopback.json")
	txt, _ := os.ReadFile(d + "loopback.proto.txt")
	info := &p4configv1.P4Info{}
	if err := prototext.Unmarshal(txt, info); err != nil {
		t.Fatal(err)
	}
	fr := make([]byte, 64)
	fr[12], fr[13] = 0x08, 0x00
	r := &Replay{Program: &Program{JSON: js, P4Info: info}, Ports: 2, Frames: []usefiles.Frame{{Port: 1, Data: fr}, {Port: 2, Data: fr}, {Port: 2, Data: fr}}}
	t0 := time.Now()
	out, err := r.Run(context.Background())
	t.Logf("%v: %d %d, %v", time.Since(t0), len(out[1]), len(out[2]), err)
}
