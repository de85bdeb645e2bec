package allreduce

import (
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/p4/ina"
)

// fakeEnv is an Env whose timers never fire and whose sends are counted.
type fakeEnv struct {
	now  time.Duration
	sent int
}

type noTimer struct{}

func (noTimer) Stop() bool { return false }

func (e *fakeEnv) Now() time.Duration                         { return e.now }
func (e *fakeEnv) Local() emulator.Addr                       { return netip.MustParseAddrPort("10.0.0.1:40000") }
func (e *fakeEnv) Send(emulator.Addr, []byte)                 { e.sent++ }
func (e *fakeEnv) After(time.Duration, func()) emulator.Timer { return noTimer{} }
func (e *fakeEnv) Rand() *rand.Rand                           { return rand.New(rand.NewPCG(1, 2)) }

// FuzzReceivers feeds arbitrary datagrams to a stream, a parameter server
// and a ring node in the middle of an all-reduce: they must never panic,
// and the tensor must only ever receive values of well-formed results.
func FuzzReceivers(f *testing.F) {
	res := ina.Append(nil, ina.Header{Flags: ina.FlagResult, Job: 1, Workers: 2, Bitmap: 3}, make([]int32, 8))
	f.Add(res)
	f.Add(ina.Append(nil, ina.Header{Flags: ina.FlagData, Job: 1, Worker: 1, Workers: 2, Bitmap: 2, Offset: 8}, make([]int32, 8)))
	f.Add(ina.Append(nil, ina.Header{Flags: ina.FlagPartial | ina.FlagRetransmit, Job: 1, Workers: 2, Bitmap: 1}, make([]int32, 8)))
	f.Add([]byte{ringData, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 3, 0, 8, 0, 0})
	f.Add([]byte{ringAck, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 1})
	peer := netip.MustParseAddrPort("10.0.0.2:40000")
	f.Fuzz(func(t *testing.T, b []byte) {
		env := &fakeEnv{}
		st, err := NewStream(StreamConfig{Job: 1, Worker: 0, Workers: 2, Target: peer, Window: 4, K: 8})
		if err != nil {
			t.Fatal(err)
		}
		st.Start(env)
		tensor := make([]int32, 50)
		st.AllReduce(tensor, 0, func(error) {})
		st.Recv(peer, append([]byte(nil), b...))

		ps, err := NewPS(PSJob{Job: 1, Workers: []emulator.Addr{peer, peer}, Elements: 50, K: 8})
		if err != nil {
			t.Fatal(err)
		}
		ps.Start(env)
		ps.Recv(peer, append([]byte(nil), b...))

		r, err := NewRing(RingConfig{Job: 1, Rank: 0, Peers: []emulator.Addr{peer, peer, peer}, K: 8, Window: 4})
		if err != nil {
			t.Fatal(err)
		}
		r.Start(env)
		r.AllReduce(make([]int32, 50), 0, func(error) {})
		r.Recv(peer, append([]byte(nil), b...))
	})
}
