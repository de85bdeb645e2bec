package roce_test

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tracebed/tracebed/emulator/dataplane"
	"github.com/tracebed/tracebed/emulator/internal/testplane"
	"github.com/tracebed/tracebed/emulator/roce"
	"github.com/tracebed/tracebed/emulator/roce/cm"
	"github.com/tracebed/tracebed/emulator/testbed"
	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/topologies"
)

// impairment is what every link does to frames, in each direction.
type impairment struct {
	name               string
	loss, dup, reorder float64
}

var impairments = []impairment{
	{"clean", 0, 0, 0},
	{"loss1", 0.01, 0, 0},
	{"loss5", 0.05, 0, 0},
	{"dup5-reorder5", 0, 0.05, 0.05},
	{"all1", 0.01, 0.01, 0.01},
	{"all5", 0.05, 0.05, 0.05},
}

// pair builds a star of two hosts whose links impair frames as imp says.
func pair(t testing.TB, imp impairment, rate units.Rate, delay time.Duration) *topologies.Topology {
	t.Helper()
	f, err := topologies.Generate(topologies.Params{Generate: "star", Name: "pair", Hosts: 2, Rate: rate, Delay: units.Duration(delay)})
	if err != nil {
		t.Fatal(err)
	}
	top, err := f.Build("pair")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range top.Links {
		l.Loss, l.Duplicate, l.Reorder = imp.loss, imp.dup, imp.reorder
	}
	return top
}

// op is one work request of the random workload and what it must leave
// behind.
type op struct {
	kind   roce.Opcode
	size   int
	src    int // offset in the sender's source region
	dst    int // offset in the target region (WRITE), receive buffer (SEND) or local READ region
	imm    uint32
	recvID uint64 // the receive request it consumes (SEND, WRITE with immediate)
}

// side is one host's state in the property test.
type side struct {
	name string
	dev  *roce.Device
	m    *cm.Manager
	conn *cm.Conn

	src, dst, rsrc, rdst, rbuf *roce.MR

	// psn, if fixPSN, is the starting PSN of this side's requests (else
	// the connection manager draws one).
	psn    uint32
	fixPSN bool
	// noRecv posts no receive request (the peer's SENDs meet RNR NAKs).
	noRecv bool
	// timeout is the local ACK timeout code (0: 8, about 1 ms).
	timeout uint8

	ops      []op // what this side sends, in order
	sendWCs  []roce.Completion
	recvWCs  []roce.Completion
	expRecv  []op // the peer's ops that consume this side's receives, in order
	failures []string
}

const (
	regionSize = 1 << 20
	gap        = 8 // untouched bytes between targets: a write outside its target shows there
)

func fill(b []byte, r *rand.Rand) {
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

// plan draws n random operations for s, laid out in disjoint slices of
// the peer's regions.
func plan(s, peer *side, r *rand.Rand, n, mtu int) {
	srcOff, dstOff, rdOff := 0, gap, gap
	recvOff := gap
	for range n {
		o := op{kind: roce.Opcode(r.IntN(5))}
		switch r.IntN(4) {
		case 0:
			o.size = r.IntN(64)
		case 1:
			o.size = mtu*(1+r.IntN(3)) + r.IntN(3) - 1
		default:
			o.size = r.IntN(6 * mtu)
		}
		if o.kind == roce.OpSend || o.kind == roce.OpSendImm || o.kind == roce.OpWriteImm {
			o.recvID = uint64(len(peer.expRecv)) + 1000
		}
		o.imm = r.Uint32()
		o.src = srcOff % (regionSize - o.size - 1)
		srcOff += o.size + 1
		switch o.kind {
		case roce.OpWrite, roce.OpWriteImm:
			o.dst = dstOff
			dstOff += o.size + gap
		case roce.OpRead:
			o.dst = rdOff
			rdOff += o.size + gap
		default:
			o.dst = recvOff
			recvOff += o.size + gap
		}
		if dstOff > regionSize || rdOff > regionSize || recvOff > regionSize {
			break
		}
		s.ops = append(s.ops, o)
		if o.recvID != 0 {
			peer.expRecv = append(peer.expRecv, o)
		}
	}
}

func newSide(t testing.TB, name string, mtu, window int) *side {
	s := &side{name: name}
	var err error
	s.dev, err = roce.NewDevice(roce.Config{MTU: mtu, Window: window})
	if err != nil {
		t.Fatal(err)
	}
	s.m = cm.New(s.dev, cm.Config{Timeout: 200 * time.Microsecond, Retries: 50})
	return s
}

func (s *side) regions(t testing.TB, r *rand.Rand) {
	reg := func(access roce.Access, random bool) *roce.MR {
		b := make([]byte, regionSize)
		if random {
			fill(b, r)
		}
		mr, err := s.dev.RegMR(b, access)
		if err != nil {
			t.Fatal(err)
		}
		return mr
	}
	s.src = reg(0, true)
	s.dst = reg(roce.AccessLocalWrite|roce.AccessRemoteWrite, false)
	s.rsrc = reg(roce.AccessRemoteRead, true)
	s.rdst = reg(roce.AccessLocalWrite, false)
	s.rbuf = reg(roce.AccessLocalWrite, false)
}

// params returns the connection parameters of s: its CQ handlers record
// completions; its receive requests are posted when the QP is ready.
func (s *side) params() cm.Params {
	cq := s.dev.CreateCQ(func(c roce.Completion) {
		if c.Opcode == roce.WCRecv || c.Opcode == roce.WCRecvWriteImm {
			s.recvWCs = append(s.recvWCs, c)
		} else {
			s.sendWCs = append(s.sendWCs, c)
		}
	})
	return cm.Params{
		QP:      roce.QPConfig{SendCQ: cq, RecvCQ: cq, MaxSendWR: 4096, MaxRecvWR: 4096},
		Timeout: cmp.Or(s.timeout, 8), // 8: 1 ms
		PSN:     s.psn,
		FixPSN:  s.fixPSN,
		Region:  cm.Region{Addr: s.dst.Addr, RKey: s.dst.RKey, Length: regionSize},
		OnReady: func(c *cm.Conn) {
			if s.noRecv {
				return
			}
			for _, o := range s.expRecv {
				if err := c.QP.PostRecv(roce.RecvWR{ID: o.recvID, Local: s.rbuf.SGE(o.dst, o.size)}); err != nil {
					s.failures = append(s.failures, fmt.Sprintf("post recv: %v", err))
				}
			}
		},
	}
}

// start posts every planned operation of s on its connection.
func (s *side) start(peer *side) {
	for i, o := range s.ops {
		wr := roce.SendWR{ID: uint64(i), Op: o.kind, Local: s.src.SGE(o.src, o.size), Imm: o.imm, Signaled: true}
		switch o.kind {
		case roce.OpWrite, roce.OpWriteImm:
			wr.Remote, wr.RKey = s.conn.Remote.Addr+uint64(o.dst), s.conn.Remote.RKey
		case roce.OpRead:
			wr.Local = s.rdst.SGE(o.dst, o.size)
			wr.Remote, wr.RKey = peer.rsrc.Addr+uint64(o.src), peer.rsrc.RKey
		}
		if err := s.conn.QP.PostSend(wr); err != nil {
			s.failures = append(s.failures, fmt.Sprintf("post send %d: %v", i, err))
		}
	}
}

func (s *side) done(peer *side) bool {
	return len(s.sendWCs) == len(s.ops) && len(s.recvWCs) == len(s.expRecv) || len(s.failures) > 0
}

// check verifies everything s sent arrived exactly once, in order, in the
// right place, and nothing else was written.
func (s *side) check(peer *side) []string {
	errs := append([]string(nil), s.failures...)
	for i, c := range s.sendWCs {
		if c.Status != roce.StatusSuccess || c.WRID != uint64(i) {
			errs = append(errs, fmt.Sprintf("%s send completion %d: %v", s.name, i, c))
			break
		}
	}
	for i, c := range peer.recvWCs {
		if i >= len(peer.expRecv) {
			break
		}
		o := peer.expRecv[i]
		want := roce.WCRecv
		if o.kind == roce.OpWriteImm {
			want = roce.WCRecvWriteImm
		}
		hasImm := o.kind != roce.OpSend
		if c.Status != roce.StatusSuccess || c.WRID != o.recvID || c.Opcode != want || c.ByteLen != uint32(o.size) || c.HasImm != hasImm || (hasImm && c.Imm != o.imm) {
			errs = append(errs, fmt.Sprintf("%s receive %d: %v, want wr=%d %v len=%d imm=%#x", peer.name, i, c, o.recvID, want, o.size, o.imm))
			break
		}
	}
	// Expected memory images of the peer's dst and rbuf and of our rdst.
	dst := make([]byte, regionSize)
	rbuf := make([]byte, regionSize)
	rdst := make([]byte, regionSize)
	for _, o := range s.ops {
		switch o.kind {
		case roce.OpWrite, roce.OpWriteImm:
			copy(dst[o.dst:], s.src.Buf[o.src:o.src+o.size])
		case roce.OpRead:
			copy(rdst[o.dst:], peer.rsrc.Buf[o.src:o.src+o.size])
		default:
			copy(rbuf[o.dst:], s.src.Buf[o.src:o.src+o.size])
		}
	}
	for _, x := range []struct {
		name      string
		got, want []byte
	}{{peer.name + ".dst", peer.dst.Buf, dst}, {peer.name + ".rbuf", peer.rbuf.Buf, rbuf}, {s.name + ".rdst", s.rdst.Buf, rdst}} {
		if !bytes.Equal(x.got, x.want) {
			n, first := 0, -1
			for i := range x.got {
				if x.got[i] != x.want[i] {
					n++
					if first < 0 {
						first = i
					}
				}
			}
			errs = append(errs, fmt.Sprintf("%s: %d bytes differ, the first at offset %d", x.name, n, first))
		}
	}
	return errs
}

// runPair connects a and b over top and runs both plans to the end.
func runPair(t *testing.T, top *topologies.Topology, seed uint64, mtu, window, n int) (a, b *side, elapsed time.Duration) {
	t.Helper()
	return runPairWith(t, top, pairOpts{seed: seed, mtu: mtu, window: window, n: n})
}

// pairOpts are runPairWith's parameters beyond the topology.
type pairOpts struct {
	seed             uint64
	mtu, window, n   int
	psnA, psnB       uint32 // starting PSNs, if fixPSN
	fixPSN           bool
	wrap             func(dataplane.Dataplane) dataplane.Dataplane // wraps the switch's data plane, if set
	limit            time.Duration                                 // of testbed time (0: 30 s)
	done             func(a, b *side) bool                         // the end of the run (nil: both plans done)
	retryCnt, rnrCnt uint8                                         // the QPs' retry counts (0: 7)
	noRecvB          bool                                          // b posts no receive request
	timeout          uint8                                         // the local ACK timeout code (0: 8, about 1 ms)
}

// runPairWith connects a and b over top and runs both plans until
// o.done.
func runPairWith(t *testing.T, top *topologies.Topology, o pairOpts) (a, b *side, elapsed time.Duration) {
	t.Helper()
	as, bs, elapsed := runQPs(t, top, o, 1)
	return as[0], bs[0], elapsed
}

// runQPs is runPairWith with qps connections between the two hosts'
// devices, each with a plan of its own both ways (a[i] and b[i] share
// their host's device and connection manager), all running at once; o.done
// is asked of every pair.
func runQPs(t *testing.T, top *topologies.Topology, o pairOpts, qps int) (as, bs []*side, elapsed time.Duration) {
	t.Helper()
	seed, mtu, window, n := o.seed, o.mtu, o.window, o.n
	r := rand.New(rand.NewPCG(seed, 42))
	for i := range qps {
		a, b := newSide(t, "a", mtu, window), newSide(t, "b", mtu, window)
		if i > 0 {
			a.name, b.name = fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i)
			a.dev, a.m, b.dev, b.m = as[0].dev, as[0].m, bs[0].dev, bs[0].m
		}
		a.psn, b.psn, a.fixPSN, b.fixPSN = o.psnA+uint32(i), o.psnB+uint32(i), o.fixPSN, o.fixPSN
		b.noRecv = o.noRecvB
		a.timeout, b.timeout = o.timeout, o.timeout
		a.regions(t, r)
		b.regions(t, r)
		plan(a, b, r, n, mtu)
		plan(b, a, r, n, mtu)
		as, bs = append(as, a), append(bs, b)
	}
	prog := testplane.Program()
	if o.wrap != nil {
		plain := prog.New
		prog.New = func(sw *topologies.Node, routes topologies.RouteTable) (dataplane.Dataplane, error) {
			d, err := plain(sw, routes)
			if err != nil {
				return nil, err
			}
			return o.wrap(d), nil
		}
	}
	if o.limit == 0 {
		o.limit = 30 * time.Second
	}
	if o.done == nil {
		o.done = func(a, b *side) bool { return a.done(b) && b.done(a) }
	}
	tb, err := testbed.NewSim(testbed.Config{Topology: top, Program: &prog, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	const service = 7
	hosts := top.Hosts()
	aps := make([]cm.Params, qps)
	for i := range qps {
		a, b := as[i], bs[i]
		bp := b.params()
		bp.RetryCnt, bp.RNRRetry = o.retryCnt, o.rnrCnt
		if err := b.m.Listen(service+uint64(i), bp, func(c *cm.Conn) { b.conn = c; b.start(a) }); err != nil {
			t.Fatal(err)
		}
		aps[i] = a.params()
		aps[i].RetryCnt, aps[i].RNRRetry = o.retryCnt, o.rnrCnt
	}
	if _, err := cm.Attach(tb, hosts[1].Name, bs[0].dev, bs[0].m); err != nil {
		t.Fatal(err)
	}
	if _, err := cm.Attach(tb, hosts[0].Name, as[0].dev, as[0].m); err != nil {
		t.Fatal(err)
	}
	// Connect once both devices have started (their Start events run first).
	tb.Sim.At(tb.Sim.Now(), func() {
		for i := range qps {
			a, b := as[i], bs[i]
			err := a.m.Connect(hosts[1].IP, service+uint64(i), aps[i], func(c *cm.Conn, err error) {
				if err != nil {
					a.failures = append(a.failures, err.Error())
					return
				}
				a.conn = c
				a.start(b)
			})
			if err != nil {
				a.failures = append(a.failures, err.Error())
			}
		}
	})
	done := func() bool {
		for i := range qps {
			if !o.done(as[i], bs[i]) {
				return false
			}
		}
		return true
	}
	err = tb.Run(context.Background(), 100*time.Microsecond, o.limit, done)
	if err != nil {
		a, b := as[0], bs[0]
		t.Fatalf("%v; a: %d/%d sends, %d/%d receives, %v; b: %d/%d sends, %d/%d receives, %v", err,
			len(a.sendWCs), len(a.ops), len(a.recvWCs), len(a.expRecv), a.dev.Counters(),
			len(b.sendWCs), len(b.ops), len(b.recvWCs), len(b.expRecv), b.dev.Counters())
	}
	return as, bs, tb.Now()
}

// TestReliableUnderImpairments is the property of an RC connection: under
// loss, duplication and reordering of 0 to 5% on every link, random
// SENDs, WRITEs (with and without immediate) and READs in both directions
// arrive exactly once, in order, into the right memory, and every request
// completes successfully in the order it was posted.
func TestReliableUnderImpairments(t *testing.T) {
	seeds := 4
	if testing.Short() {
		seeds = 1
	}
	for _, imp := range impairments {
		for seed := range uint64(seeds) {
			mtu := []int{256, 1024, 4096}[seed%3]
			window := []int{4, 16, 128}[(seed/3+seed)%3]
			t.Run(fmt.Sprintf("%s/seed%d-mtu%d-win%d", imp.name, seed, mtu, window), func(t *testing.T) {
				t.Parallel()
				top := pair(t, imp, 10*units.Gbps, 2*time.Microsecond)
				a, b, _ := runPair(t, top, seed+1, mtu, window, 60)
				errs := append(a.check(b), b.check(a)...)
				for _, e := range errs {
					t.Error(e)
				}
				if imp.loss > 0 && a.dev.Counters().Retransmitted+b.dev.Counters().Retransmitted == 0 {
					t.Error("frames were lost but nothing was retransmitted")
				}
				if t.Failed() {
					t.Logf("a: %v", a.dev.Counters())
					t.Logf("b: %v", b.dev.Counters())
				}
			})
		}
	}
}
