package paging

import (
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/p4/farmem"
	memtrace "github.com/tracebed/tracebed/traces/mem"
)

// fakeEnv is an Env that records sends and never fires timers.
type fakeEnv struct {
	now  time.Duration
	sent int
	rng  *rand.Rand
}

type nopTimer struct{}

func (nopTimer) Stop() bool { return true }

func (e *fakeEnv) Now() time.Duration   { return e.now }
func (e *fakeEnv) Local() emulator.Addr { return netip.MustParseAddrPort("10.0.0.1:7471") }
func (e *fakeEnv) Send(emulator.Addr, []byte) {
	e.sent++
}
func (e *fakeEnv) After(time.Duration, func()) emulator.Timer { return nopTimer{} }
func (e *fakeEnv) Rand() *rand.Rand                           { return e.rng }

// FuzzServerRecv feeds arbitrary messages to a memory server: it never
// panics, and stores only writes whose data matches their checksum.
func FuzzServerRecv(f *testing.F) {
	data := make([]byte, 4096)
	f.Add(farmem.Header{Type: farmem.TypeWrite, Page: 3, Version: 1, Sum: checksum(data)}.Append(nil, data))
	f.Add(farmem.Header{Type: farmem.TypeRead, Page: 3}.Append(nil, nil))
	f.Add(farmem.Header{Type: farmem.TypeWrite, Page: 1 << 40, Version: 1, Sum: checksum(data)}.Append(nil, data))
	f.Fuzz(func(t *testing.T, msg []byte) {
		s := NewServer(4096)
		env := &fakeEnv{rng: rand.New(rand.NewPCG(1, 2))}
		s.Start(env)
		from := netip.MustParseAddrPort("10.0.0.2:7471")
		s.Recv(from, msg)
		h, d, err := farmem.Parse(msg)
		if err == nil && h.Type == farmem.TypeWrite && h.Page < 1<<26 {
			if _, sum, stored, ok := s.Lookup(from, h.Page); ok && (sum != checksum(stored) || checksum(d) != h.Sum) {
				t.Fatal("stored a page that does not match its checksum")
			}
		}
	})
}

// FuzzHostRecv feeds arbitrary messages to a paging host waiting for a
// fetch: it never panics, and a message that is not the answer it waits for
// changes nothing but counters.
func FuzzHostRecv(f *testing.F) {
	f.Add(farmem.Header{Type: farmem.TypeData, ID: 1, Page: 0, Flags: farmem.FlagNotFound}.Append(nil, nil))
	f.Add(farmem.Header{Type: farmem.TypeAck, ID: 1, Page: 0, Version: 1}.Append(nil, nil))
	f.Add(farmem.Header{Type: farmem.TypeData, ID: 7, Page: 9}.Append(nil, make([]byte, 4096)))
	f.Fuzz(func(t *testing.T, msg []byte) {
		acc := []memtrace.Access{{Page: 0, Write: true}, {Page: 1, Write: true}, {Page: 0}}
		h, err := NewHost(HostConfig{ID: 1, Limit: 1, Headroom: 0, Servers: []netip.AddrPort{netip.MustParseAddrPort("10.0.0.9:7470")},
			Engine: engine{direct: 1}}, memtrace.NewSliceSource(acc), 0)
		if err != nil {
			t.Fatal(err)
		}
		h.Start(&fakeEnv{rng: rand.New(rand.NewPCG(1, 2))})
		h.Recv(netip.MustParseAddrPort("10.0.0.9:7470"), msg)
		h.Recv(netip.MustParseAddrPort("10.0.0.9:7470"), msg) // and its duplicate
	})
}
