package p4rt

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc/status"

	"github.com/tracebed/tracebed/emulator"
)

// manualEnv is a substrate whose calls wait until the test runs them, in
// order (emulator.Caller's contract), each completion after its call.
type manualEnv struct {
	emulator.Env
	queue []func()
	log   *[]string
}

func (e *manualEnv) Call(op func(ctx context.Context) error, done func(err error)) {
	*e.log = append(*e.log, "call")
	e.queue = append(e.queue, func() { done(op(context.Background())) })
}

// step runs the oldest pending call and its completion.
func (e *manualEnv) step() bool {
	if len(e.queue) == 0 {
		return false
	}
	f := e.queue[0]
	e.queue = e.queue[1:]
	f()
	return true
}

// plainEnv makes no calls.
type plainEnv struct{}

func (plainEnv) Now() time.Duration                         { return 0 }
func (plainEnv) Local() emulator.Addr                       { return emulator.Addr{} }
func (plainEnv) Send(emulator.Addr, []byte)                 {}
func (plainEnv) After(time.Duration, func()) emulator.Timer { return nil }
func (plainEnv) Rand() *rand.Rand                           { return rand.New(rand.NewPCG(1, 2)) }

// TestPort: a port's writes and reads reach the device only when the
// substrate runs them, in order, their completions come back after, and
// Then waits for every call made before it (running at once when none is
// pending).
func TestPort(t *testing.T) {
	if _, err := NewPort(plainEnv{}); err == nil || !strings.Contains(err.Error(), "emulator.Caller") {
		t.Errorf("an Env without calls: %v", err)
	}
	var log []string
	env := &manualEnv{Env: plainEnv{}, log: &log}
	port, err := NewPort(env)
	if err != nil {
		t.Fatal(err)
	}
	y := newToy(t)
	c := Local(y.t)
	port.Then(func() { log = append(log, "then, idle") })
	entry := &p4v1.TableEntry{TableId: 0x02000001, Priority: 1, Match: []*p4v1.FieldMatch{exact(5, 1)}, Action: set(7)}
	port.Write(c, []*p4v1.Update{Insert(Table(entry))}, func(err error) { log = append(log, "written: "+errString(err)) })
	port.Read(c, []*p4v1.Entity{Table(&p4v1.TableEntry{TableId: 0x02000001})}, func(ents []*p4v1.Entity, err error) {
		log = append(log, "read "+string(rune('0'+len(ents)))+": "+errString(err))
	})
	port.Then(func() { log = append(log, "then") })
	port.Write(c, []*p4v1.Update{Insert(Table(entry))}, func(err error) { log = append(log, "again: "+errString(err)) })
	if len(y.entries) != 0 || port.Pending() != 4 {
		t.Fatalf("before the substrate ran anything: entries %v, %d pending", y.entries, port.Pending())
	}
	for env.step() {
	}
	want := []string{"then, idle", "call", "call", "call", "call", "written: ok", "read 1: ok", "then", "again: AlreadyExists"}
	if !slices.Equal(log, want) {
		t.Errorf("log\n%q\nwant\n%q", log, want)
	}
	if port.Pending() != 0 {
		t.Errorf("%d calls pending after all completed", port.Pending())
	}
}

// errString is "ok" or the error's P4Runtime code.
func errString(err error) string {
	if err == nil {
		return "ok"
	}
	return status.Code(err).String()
}
