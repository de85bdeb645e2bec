package freeina

import (
	"math"
	"net/netip"
	"testing"
	"time"
)

// FuzzDecodeCtl: decoding arbitrary bytes never panics, and a message
// that decodes encodes to bytes that decode to the same message (the
// jitter to the nanosecond it travels in).
func FuzzDecodeCtl(f *testing.F) {
	a := netip.MustParseAddr("10.0.0.1")
	for _, m := range []ctlMsg{
		{Type: msgLaunch, Job: 1, Rank: 2, N: 4, Succ: a, Pred: a, PS: a, Values: 256, K: 256, Iterations: 3,
			Compute: time.Millisecond, Jitter: 0.02, Seed: 7, PSEstimate: time.Second, Leader: true, Message: 4096, PSWindow: 2},
		{Type: msgPSLaunch, Job: 1, N: 4, Values: 10, Message: 4096},
		{Type: msgSetup, Job: 2, Rank: 1, QPN: 0x11, RKey: 5, VA: 1 << 40, PSN: 0xfffffe},
		{Type: msgReady, Job: 2, Round: 3, Rank: 1, PSN: 9, Wants: true, Took: time.Microsecond},
		{Type: msgGo, Job: 2, Round: 3, Path: 1, Window: 8, PredPSN: 4},
		{Type: msgDone, Job: 2, Round: 3, Rank: 1, OK: false, Errs: 1, Took: time.Second, Err: "boom"},
		{Type: msgDone, Job: 2, Round: 4, Rank: 0, OK: true, Took: time.Second, Recovered: 17},
		{Type: msgFinish, Job: 2},
		{Type: msgStopped, Job: 2, Round: 4, Rank: 3, Got: 12, Errored: true},
		{Type: msgStop, Job: 2, Round: 4},
		{Type: msgRecover, Job: 2, Round: 4, From: 12},
	} {
		f.Add(m.encode(nil))
	}
	f.Add([]byte{})
	f.Add([]byte{numMsgs, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeCtl(b)
		if err != nil {
			return
		}
		m2, err := decodeCtl(m.encode(nil))
		if err != nil {
			t.Fatalf("%v re-encoded does not decode: %v", &m, err)
		}
		if math.Abs(m2.Jitter-m.Jitter) > 2e-9 {
			t.Fatalf("jitter %v became %v", m.Jitter, m2.Jitter)
		}
		m2.Jitter = m.Jitter
		if m2 != m {
			t.Fatalf("round trip: %+v became %+v", m, m2)
		}
	})
}
