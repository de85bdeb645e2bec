package roce_test

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/dataplane"
	"github.com/tracebed/tracebed/emulator/frame"
	"github.com/tracebed/tracebed/emulator/roce"
	"github.com/tracebed/tracebed/emulator/roce/wire"
	"github.com/tracebed/tracebed/internal/units"
)

// soakCases is the number of random cases of each soak below; 0 keeps
// the defaults (a few under -short, more otherwise). A long soak:
//
//	go test ./emulator/roce -run Soak -roce.soak 500 -timeout 1h
var soakCases = flag.Int("roce.soak", 0, "random cases of each RoCE soak test (0: the default count)")

// soakCount returns the number of cases to run: n by default, short
// under -short, the flag's when set.
func soakCount(n, short int) int {
	switch {
	case *soakCases > 0:
		return *soakCases
	case testing.Short():
		return short
	}
	return n
}

// soakCase is one random RC connection: its network, its devices and its
// starting PSNs.
type soakCase struct {
	imp         impairment
	rate        units.Rate
	delay       time.Duration
	mtu, window int
	n           int
	psnA, psnB  uint32
}

func (c soakCase) String() string {
	return fmt.Sprintf("loss %.3f dup %.3f reorder %.3f, %v, delay %v, mtu %d, window %d, %d ops a side, PSNs %#x %#x",
		c.imp.loss, c.imp.dup, c.imp.reorder, c.rate, c.delay, c.mtu, c.window, c.n, c.psnA, c.psnB)
}

// drawCase draws a case from seed: each impairment 0–5% (none in a
// quarter of the cases), PSNs a few packets below 2^24 in three cases
// of four (so that every connection's sequence wraps), anywhere otherwise.
func drawCase(seed uint64) soakCase {
	r := rand.New(rand.NewPCG(seed, 0x50ac))
	imp := func() float64 {
		if r.IntN(4) == 0 {
			return 0
		}
		return 0.05 * r.Float64()
	}
	c := soakCase{
		imp:    impairment{name: "random", loss: imp(), dup: imp(), reorder: imp()},
		rate:   []units.Rate{units.Gbps, 10 * units.Gbps, 25 * units.Gbps, 100 * units.Gbps}[r.IntN(4)],
		delay:  time.Duration(1+r.IntN(20)) * time.Microsecond,
		mtu:    []int{256, 512, 1024, 2048, 4096}[r.IntN(5)],
		window: []int{1, 2, 4, 16, 64, 256}[r.IntN(6)],
		n:      10 + r.IntN(50),
	}
	psn := func() uint32 {
		if r.IntN(4) == 0 {
			return r.Uint32() & wire.PSNMask
		}
		return (1<<24 - 1 - uint32(r.IntN(4*c.n))) & wire.PSNMask
	}
	c.psnA, c.psnB = psn(), psn()
	return c
}

// TestSoakReliable is TestReliableUnderImpairments with every parameter
// drawn: loss, duplication and reordering of 0–5% each, link rate and
// delay, MTU, requester window, the number of operations, starting PSNs
// just below 2^24 so that the PSNs wrap during the run, and 1–8
// connections between the two devices at once. Every
// request must complete successfully, in order, and every byte land once
// where it was sent, nothing else written.
func TestSoakReliable(t *testing.T) {
	n := soakCount(16, 4)
	for seed := range uint64(n) {
		c := drawCase(seed + 1)
		// Connections between the two devices: one in half the cases,
		// up to 8 at once otherwise (a stream of its own).
		qps := 1
		if q := rand.New(rand.NewPCG(seed, 0x9b5)); q.IntN(2) == 0 {
			qps = 2 + q.IntN(7)
		}
		t.Run(fmt.Sprintf("seed%d-qps%d", seed+1, qps), func(t *testing.T) {
			t.Parallel()
			top := pair(t, c.imp, c.rate, c.delay)
			// The ACK timeout covers twice a full buffer's drain, as a
			// deployment's must: shorter, the connections' own queueing
			// (several windows at 1 Gbps) exhausts the retries.
			var code uint8 = 8
			for _, l := range top.Links {
				drain := time.Duration(float64(l.Buffer) * 8 / float64(l.Rate) * float64(time.Second))
				for wire.AckTimeout(code) < 2*drain {
					code++
				}
			}
			as, bs, _ := runQPs(t, top, pairOpts{seed: seed + 1, mtu: c.mtu, window: c.window, n: c.n,
				psnA: c.psnA, psnB: c.psnB, fixPSN: true, timeout: code}, qps)
			for i := range as {
				for _, e := range append(as[i].check(bs[i]), bs[i].check(as[i])...) {
					t.Error(e)
				}
			}
			if t.Failed() {
				t.Logf("case: %v, %d connections", c, qps)
				t.Logf("a: %v", as[0].dev.Counters())
				t.Logf("b: %v", bs[0].dev.Counters())
			}
		})
	}
}

// blackhole drops every RoCEv2 frame that drop selects from the after-th
// on: a peer that died, a path that broke, or (selecting one direction)
// a connection whose acknowledgements are all lost.
type blackhole struct {
	dataplane.Dataplane
	drop  func(h frame.UDP) bool
	after int

	seen int
	cut  time.Duration // when the first frame was dropped (-1 before)
}

func (b *blackhole) Process(now time.Duration, in int, f []byte, out emulator.Emitter) {
	if h, _, err := frame.ParseUDP(f); err == nil && h.Dst.Port() == wire.Port && b.drop(h) {
		b.seen++
		if b.seen >= b.after {
			if b.cut < 0 {
				b.cut = now
			}
			return
		}
	}
	b.Dataplane.Process(now, in, f, out)
}

// checkFailed checks one requester's completions when its peer stopped
// answering: every request completed (none left hanging), in the order
// posted; successes first, then at most one failing with want, then
// flushes. It returns the index of the failure (len if none).
func checkFailed(s *side, want roce.Status) (int, []string) {
	var errs []string
	if len(s.sendWCs) != len(s.ops) {
		errs = append(errs, fmt.Sprintf("%s: %d of %d requests completed", s.name, len(s.sendWCs), len(s.ops)))
	}
	failed := len(s.sendWCs)
	for i, c := range s.sendWCs {
		switch {
		case c.WRID != uint64(i):
			errs = append(errs, fmt.Sprintf("%s completion %d: %v, out of order", s.name, i, c))
		case i < failed && c.Status == roce.StatusSuccess:
		case i < failed:
			failed = i
			if c.Status != want {
				errs = append(errs, fmt.Sprintf("%s completion %d: %v, want %v", s.name, i, c, want))
			}
		case c.Status != roce.StatusWRFlushErr:
			errs = append(errs, fmt.Sprintf("%s completion %d after the failure: %v, want flushed", s.name, i, c))
		}
		if len(errs) > 0 {
			break
		}
	}
	return failed, errs
}

// TestSoakRetryExceeded: the network stops carrying a connection's RoCEv2
// frames in the middle of a random workload — both directions, or only
// one of them (a's requests, or their acknowledgements) — with a random
// retry count and link impairments. Both requesters must report it as
// errors, not hang: every request completes, the first one not
// acknowledged with retry_exceeded, the rest flushed; and the failure is
// reported within the retries' time after the cut.
func TestSoakRetryExceeded(t *testing.T) {
	n := soakCount(16, 4)
	for seed := range uint64(n) {
		c := drawCase(seed + 1000)
		r := rand.New(rand.NewPCG(seed, 0xdead))
		retry := uint8(1 + r.IntN(7))
		dir := []string{"both", "requests", "acks"}[r.IntN(3)]
		after := 1 + r.IntN(60)
		t.Run(fmt.Sprintf("seed%d-%s-retry%d", seed+1000, dir, retry), func(t *testing.T) {
			t.Parallel()
			top := pair(t, c.imp, c.rate, c.delay)
			hosts := top.Hosts()
			ipA := hosts[0].IP
			var bh *blackhole
			drop := func(h frame.UDP) bool {
				switch dir {
				case "requests": // a → b: a's requests, and its acknowledgements of b's
					return h.Src.Addr() == ipA
				case "acks": // b → a
					return h.Dst.Addr() == ipA
				}
				return true
			}
			a, b, end := runPairWith(t, top, pairOpts{seed: seed + 1000, mtu: c.mtu, window: c.window, n: c.n,
				psnA: c.psnA, psnB: c.psnB, fixPSN: true, retryCnt: retry, limit: 10 * time.Second,
				wrap: func(d dataplane.Dataplane) dataplane.Dataplane {
					bh = &blackhole{Dataplane: d, drop: drop, after: after, cut: -1}
					return bh
				},
				done: func(a, b *side) bool {
					return len(a.sendWCs) == len(a.ops) && len(b.sendWCs) == len(b.ops) || len(a.failures)+len(b.failures) > 0
				}})
			fa, errsA := checkFailed(a, roce.StatusRetryExcErr)
			fb, errsB := checkFailed(b, roce.StatusRetryExcErr)
			for _, e := range append(append(append([]string(nil), a.failures...), errsA...), errsB...) {
				t.Error(e)
			}
			// Whoever failed did so within its retries after the cut: at
			// most retry+1 timeouts (1 ms each, the QPs' code 8) from its
			// last progress, which is at the latest when the cut began,
			// plus the time to send what the window holds.
			timeout := wire.AckTimeout(8)
			send := time.Duration(float64(c.window*(c.mtu+100)*8)/float64(c.rate)*float64(time.Second)) + 4*c.delay
			if bh.cut >= 0 && (fa < len(a.ops) || fb < len(b.ops)) {
				if bound := bh.cut + time.Duration(retry+2)*(timeout+send); end > bound {
					t.Errorf("the failure was reported at %v, the cut began at %v: more than %d retries of %v", end, bh.cut, retry, timeout)
				}
			}
			if bh.cut >= 0 && fa == len(a.ops) && fb == len(b.ops) && dir != "requests" {
				// Every request completed although the network stopped
				// carrying them: possible only if all were acknowledged
				// before the cut.
				t.Logf("every request acknowledged before the cut")
			}
			if t.Failed() || testing.Verbose() {
				t.Logf("case: %v; cut at %v after %d frames, run ended at %v; a failed at %d of %d, b at %d of %d",
					c, bh.cut, after, end, fa, len(a.ops), fb, len(b.ops))
				t.Logf("a: %v", a.dev.Counters())
				t.Logf("b: %v", b.dev.Counters())
			}
		})
	}
}

// TestSoakRNRRetryExceeded: b posts no receive request, so a's first SEND
// or WRITE with immediate meets RNR NAKs until a's RNR retry count (1–6)
// runs out. Every request of a before it completes successfully, it
// completes with rnr_retry_exceeded, the rest are flushed: no hang.
func TestSoakRNRRetryExceeded(t *testing.T) {
	n := soakCount(12, 3)
	for seed := range uint64(n) {
		c := drawCase(seed + 2000)
		c.imp = impairment{name: "clean"} // RNR NAKs, not losses, end the connection
		rnr := uint8(1 + seed%6)
		t.Run(fmt.Sprintf("seed%d-rnr%d", seed+2000, rnr), func(t *testing.T) {
			t.Parallel()
			top := pair(t, c.imp, c.rate, c.delay)
			a, b, _ := runPairWith(t, top, pairOpts{seed: seed + 2000, mtu: c.mtu, window: c.window, n: c.n,
				psnA: c.psnA, psnB: c.psnB, fixPSN: true, rnrCnt: rnr, noRecvB: true, limit: 10 * time.Second,
				done: func(a, b *side) bool {
					return len(a.sendWCs) == len(a.ops) && len(b.sendWCs) == len(b.ops) || len(a.failures)+len(b.failures) > 0
				}})
			first := len(a.ops)
			for i, o := range a.ops {
				if o.recvID != 0 {
					first = i
					break
				}
			}
			fa, errs := checkFailed(a, roce.StatusRNRRetryExcErr)
			for _, e := range append(append([]string(nil), a.failures...), errs...) {
				t.Error(e)
			}
			if fa != first {
				t.Errorf("a failed at request %d, its first needing a receive is %d", fa, first)
			}
			// b's requests: a's QP went to ERR, so b's requests
			// after that are not answered; b must fail with
			// retry_exceeded, or succeed if all were answered first.
			if _, errs := checkFailed(b, roce.StatusRetryExcErr); len(errs) > 0 {
				for _, e := range errs {
					t.Error(e)
				}
			}
			if t.Failed() {
				t.Logf("case: %v", c)
				t.Logf("a: %v", a.dev.Counters())
				t.Logf("b: %v", b.dev.Counters())
			}
		})
	}
}
