package roce

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/roce/wire"
)

// The transcript tests drive two devices, a (10.0.0.1) and b (10.0.0.2),
// over a scripted network: every packet a device sends waits in its
// outbox until the script delivers, drops, duplicates, reorders or
// corrupts it, and time moves only with "tick". Each command prints what
// happened: packets sent ("a> …"), completions ("a: cqe …"), errors.
//
// Commands (testdata/transcripts/*.txt):
//
//	init [mtu=N] [window=N] [ackevery=N]        new devices a and b
//	connect [timeout=T] [retry=N] [rnr_retry=N] [min_rnr=N] [rd=N] [psn_a=P] [psn_b=P] [access=…]
//	                                            one QP on each, through INIT and RTR to RTS
//	mr <dev> <name> size=N [access=lw,rw,rr] [fill=N]
//	post-send <dev> id=N op=send|send_imm|write|write_imm|read local=MR:OFF:LEN [remote=MR:OFF] [rkey=K] [lkey=K] [imm=N] [unsignaled] [solicited] [spare]
//	post-recv <dev> id=N local=MR:OFF:LEN [lkey=K] [spare]
//	deliver <dev> [n=N] [drop=i,j] [dup=i] [reverse]  deliver the first N (all) of dev's outbox to its peer
//	drop <dev> [i,j…|all]                       remove packets from dev's outbox
//	corrupt <dev> i [byte=N]                    flip a bit of a packet in dev's outbox
//	inject <dev> opcode=NAME psn=P [qp=N] [pkey=K] [rkey=K] [va=V] [len=N] [payload=N] [syndrome=S] [from=IP]
//	                                            a hand-made packet to dev, from its peer
//	run [max=N]                                 deliver both ways until no packet is left
//	tick <duration>                             advance the clock, firing timers
//	modify <dev> state=S                        modify the QP's state
//	create-qp <dev>                             a second QP in RESET (for transition tests)
//	transition <dev> state=S [attrs…]           modify that QP with the listed attributes
//	state                                       QP states, PSNs
//	counters <dev>                              the device's non-zero counters
//	cmp <dev> <mr> <off> <dev> <mr> <off> <len> compare region bytes
//	flight                                      the outboxes
func TestTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata/transcripts", func(t *testing.T, path string) {
		h := &harness{}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			h.log.Reset()
			if err := h.run(d); err != nil {
				fmt.Fprintf(&h.log, "error: %v\n", err)
			}
			return h.log.String()
		})
	})
}

type harness struct {
	now    time.Duration
	seq    uint64
	timers []*fakeTimer
	devs   map[string]*tdev
	log    strings.Builder
	spare  *QP
}

type tdev struct {
	name string
	addr netip.AddrPort
	dev  *Device
	env  *fakeEnv
	out  [][]byte
	qp   *QP
	cq   *CQ
	mrs  map[string]*MR
	peer *tdev
}

type fakeEnv struct {
	h   *harness
	d   *tdev
	rng *rand.Rand
}

func (e *fakeEnv) Now() time.Duration   { return e.h.now }
func (e *fakeEnv) Local() emulator.Addr { return e.d.addr }
func (e *fakeEnv) Rand() *rand.Rand     { return e.rng }

func (e *fakeEnv) Send(to emulator.Addr, p []byte) {
	if to != netip.AddrPortFrom(e.d.peer.addr.Addr(), wire.Port) {
		fmt.Fprintf(&e.h.log, "%s> to unexpected %v\n", e.d.name, to)
	}
	e.d.out = append(e.d.out, bytes.Clone(p))
	fmt.Fprintf(&e.h.log, "%s> %s\n", e.d.name, describePacket(p))
}

type fakeTimer struct {
	at   time.Duration
	seq  uint64
	f    func()
	done bool
}

func (t *fakeTimer) Stop() bool {
	was := !t.done
	t.done = true
	return was
}

func (e *fakeEnv) After(d time.Duration, f func()) emulator.Timer {
	e.h.seq++
	t := &fakeTimer{at: e.h.now + max(d, 0), seq: e.h.seq, f: f}
	e.h.timers = append(e.h.timers, t)
	return t
}

// describePacket formats a RoCEv2 payload compactly.
func describePacket(b []byte) string {
	p, err := wire.Parse(b)
	if err != nil {
		return fmt.Sprintf("unparsable (%v)", err)
	}
	name := strings.NewReplacer("RDMA_", "", "_WITH_IMMEDIATE", "_IMM", "ACKNOWLEDGE", "ACK", "RESPONSE", "RESP").Replace(p.Opcode.String())
	s := fmt.Sprintf("%s psn=%d", name, p.PSN)
	if p.AckReq {
		s += " ackreq"
	}
	if p.Opcode.HasRETH() {
		s += fmt.Sprintf(" va=%#x rkey=%#x dmalen=%d", p.RETH.VA, p.RETH.RKey, p.RETH.Length)
	}
	if p.Opcode.HasAETH() {
		switch p.AETH.Kind() {
		case wire.SyndromeACK:
			if p.Opcode == wire.Acknowledge {
				s += fmt.Sprintf(" credits=%d", p.AETH.Value())
			}
		case wire.SyndromeRNR:
			s += fmt.Sprintf(" RNR timer=%d", p.AETH.Value())
		case wire.SyndromeNAK:
			s += " NAK " + [...]string{"sequence", "invalid", "remote_access", "remote_op", "invalid_rd"}[min(p.AETH.Value(), 4)]
		}
		s += fmt.Sprintf(" msn=%d", p.AETH.MSN)
	}
	if p.Opcode.HasImm() {
		s += fmt.Sprintf(" imm=%d", p.Imm)
	}
	if p.Opcode.HasPayload() {
		s += fmt.Sprintf(" len=%d", len(p.Payload))
	}
	if p.SE {
		s += " se"
	}
	return s
}

func (h *harness) dev(name string) (*tdev, error) {
	d := h.devs[name]
	if d == nil {
		return nil, fmt.Errorf("no device %q (run init)", name)
	}
	return d, nil
}

// args turns datadriven's arguments into a map; positional arguments
// (without '=') come back in order.
func args(d *datadriven.TestData) (map[string]string, []string) {
	kv := map[string]string{}
	var pos []string
	for _, a := range d.CmdArgs {
		if len(a.Vals) == 0 {
			pos = append(pos, a.Key)
			continue
		}
		kv[a.Key] = strings.Join(a.Vals, ",")
	}
	return kv, pos
}

func num(kv map[string]string, key string, def uint64) (uint64, error) {
	v, ok := kv[key]
	if !ok {
		return def, nil
	}
	return strconv.ParseUint(v, 0, 64)
}

func (h *harness) run(d *datadriven.TestData) error {
	kv, pos := args(d)
	switch d.Cmd {
	case "init":
		return h.init(kv)
	case "connect":
		return h.connect(kv)
	case "mr":
		return h.mr(kv, pos)
	case "post-send":
		return h.postSend(kv, pos)
	case "post-recv":
		return h.postRecv(kv, pos)
	case "deliver":
		return h.deliver(kv, pos)
	case "drop":
		return h.drop(pos)
	case "corrupt":
		return h.corrupt(kv, pos)
	case "inject":
		return h.inject(kv, pos)
	case "run":
		max, _ := num(kv, "max", 10000)
		for i := uint64(0); i < max; i++ {
			moved := false
			for _, name := range []string{"a", "b"} {
				dv := h.devs[name]
				if len(dv.out) > 0 {
					moved = true
					h.deliverOne(dv, 0)
				}
			}
			if !moved {
				return nil
			}
		}
		return fmt.Errorf("still busy after %d rounds", max)
	case "tick":
		if len(pos) != 1 {
			return fmt.Errorf("tick DURATION")
		}
		dur, err := time.ParseDuration(pos[0])
		if err != nil {
			return err
		}
		h.tick(dur)
		return nil
	case "modify":
		dv, err := h.dev(pos[0])
		if err != nil {
			return err
		}
		st, err := parseState(kv["state"])
		if err != nil {
			return err
		}
		return dv.qp.Modify(QPAttr{State: st}, AttrState)
	case "create-qp":
		dv, err := h.dev(pos[0])
		if err != nil {
			return err
		}
		qp, err := dv.dev.CreateQP(QPConfig{SendCQ: dv.cq, RecvCQ: dv.cq})
		h.spare = qp
		if err == nil {
			fmt.Fprintf(&h.log, "qp %d %v\n", qp.QPN(), qp.State())
		}
		return err
	case "transition":
		return h.transition(kv)
	case "state":
		for _, name := range []string{"a", "b"} {
			dv := h.devs[name]
			qp := dv.qp
			fmt.Fprintf(&h.log, "%s: qp=%d %v sq_psn=%d una=%d epsn=%d msn=%d sq=%d rq=%d\n", name, qp.QPN(), qp.State(),
				qp.sq.psn, qp.sq.una, qp.res.epsn, qp.res.msn, qp.SendQueued(), qp.RecvQueued())
		}
		if h.spare != nil {
			fmt.Fprintf(&h.log, "spare: qp=%d %v\n", h.spare.QPN(), h.spare.State())
		}
		return nil
	case "counters":
		dv, err := h.dev(pos[0])
		if err != nil {
			return err
		}
		fmt.Fprintf(&h.log, "%s\n", dv.dev.Counters())
		return nil
	case "cmp":
		return h.cmp(pos)
	case "flight":
		for _, name := range []string{"a", "b"} {
			for i, p := range h.devs[name].out {
				fmt.Fprintf(&h.log, "%s[%d] %s\n", name, i, describePacket(p))
			}
		}
		return nil
	}
	return fmt.Errorf("unknown command %q", d.Cmd)
}

func (h *harness) init(kv map[string]string) error {
	mtu, _ := num(kv, "mtu", 1024)
	win, _ := num(kv, "window", 8)
	every, _ := num(kv, "ackevery", 4)
	*h = harness{devs: map[string]*tdev{}}
	for i, name := range []string{"a", "b"} {
		dev, err := NewDevice(Config{MTU: int(mtu), Window: int(win), AckEvery: int(every)})
		if err != nil {
			return err
		}
		dv := &tdev{name: name, addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}), wire.Port), dev: dev, mrs: map[string]*MR{}}
		dv.env = &fakeEnv{h: h, d: dv, rng: rand.New(rand.NewPCG(1, uint64(i)))}
		h.devs[name] = dv
	}
	h.devs["a"].peer, h.devs["b"].peer = h.devs["b"], h.devs["a"]
	for _, name := range []string{"a", "b"} {
		dv := h.devs[name]
		dv.dev.Start(dv.env)
		dv.cq = dv.dev.CreateCQ(func(c Completion) { fmt.Fprintf(&h.log, "%s: cqe %v\n", dv.name, c) })
	}
	return nil
}

func parseAccess(s string) (Access, error) {
	var a Access
	for _, f := range strings.Split(s, ",") {
		switch f {
		case "lw":
			a |= AccessLocalWrite
		case "rw":
			a |= AccessRemoteWrite
		case "rr":
			a |= AccessRemoteRead
		case "", "none":
		default:
			return 0, fmt.Errorf("access %q: want lw, rw, rr", f)
		}
	}
	return a, nil
}

func parseState(s string) (QPState, error) {
	for i, n := range stateNames {
		if strings.EqualFold(n, s) {
			return QPState(i), nil
		}
	}
	return 0, fmt.Errorf("state %q", s)
}

func (h *harness) connect(kv map[string]string) error {
	timeout, _ := num(kv, "timeout", 10)
	retry, _ := num(kv, "retry", 7)
	rnr, _ := num(kv, "rnr_retry", 7)
	minRNR, _ := num(kv, "min_rnr", 1)
	rd, _ := num(kv, "rd", 4)
	psnA, _ := num(kv, "psn_a", 100)
	psnB, _ := num(kv, "psn_b", 500)
	access := AccessRemoteWrite | AccessRemoteRead
	if s, ok := kv["access"]; ok {
		var err error
		if access, err = parseAccess(s); err != nil {
			return err
		}
	}
	a, b := h.devs["a"], h.devs["b"]
	for _, dv := range []*tdev{a, b} {
		qp, err := dv.dev.CreateQP(QPConfig{SendCQ: dv.cq, RecvCQ: dv.cq, MaxSendWR: 64, MaxRecvWR: 64})
		if err != nil {
			return err
		}
		dv.qp = qp
		if err := qp.Modify(QPAttr{State: StateInit, PKey: wire.DefaultPKey, Access: access}, AttrState|AttrPKey|AttrAccess); err != nil {
			return err
		}
	}
	psn := map[*tdev]uint32{a: uint32(psnA), b: uint32(psnB)}
	for _, dv := range []*tdev{a, b} {
		if err := dv.qp.Modify(QPAttr{State: StateRTR, PathMTU: dv.dev.MTU(), DestQPN: dv.peer.qp.QPN(), Remote: dv.peer.addr.Addr(),
			RQPSN: psn[dv.peer], MaxDestRdAtomic: int(rd), MinRNRTimer: uint8(minRNR)},
			AttrState|AttrPathMTU|AttrDestQPN|AttrRemote|AttrRQPSN|AttrMaxDestRdAtomic|AttrMinRNRTimer); err != nil {
			return err
		}
		if err := dv.qp.Modify(QPAttr{State: StateRTS, SQPSN: psn[dv], Timeout: uint8(timeout), RetryCnt: uint8(retry), RNRRetry: uint8(rnr), MaxRdAtomic: int(rd)},
			AttrState|AttrSQPSN|AttrTimeout|AttrRetryCnt|AttrRNRRetry|AttrMaxRdAtomic); err != nil {
			return err
		}
	}
	fmt.Fprintf(&h.log, "a: qp=%d RTS sq_psn=%d; b: qp=%d RTS sq_psn=%d\n", a.qp.QPN(), psnA, b.qp.QPN(), psnB)
	return nil
}

func (h *harness) mr(kv map[string]string, pos []string) error {
	if len(pos) != 2 {
		return fmt.Errorf("mr DEV NAME size=N")
	}
	dv, err := h.dev(pos[0])
	if err != nil {
		return err
	}
	size, err := num(kv, "size", 4096)
	if err != nil {
		return err
	}
	access, err := parseAccess(kv["access"])
	if err != nil {
		return err
	}
	buf := make([]byte, size)
	if fill, ok := kv["fill"]; ok {
		seed, _ := strconv.Atoi(fill)
		for i := range buf {
			buf[i] = byte(seed + i*13 + i>>8)
		}
	}
	mr, err := dv.dev.RegMR(buf, access)
	if err != nil {
		return err
	}
	dv.mrs[pos[1]] = mr
	fmt.Fprintf(&h.log, "%s: mr %s key=%#x addr=%#x size=%d %v\n", dv.name, pos[1], mr.LKey, mr.Addr, size, access)
	return nil
}

// sge parses MR:OFF:LEN (or MR:OFF) against dev's regions.
func (dv *tdev) sge(s string) (*MR, uint64, uint32, error) {
	parts := strings.Split(s, ":")
	mr := dv.mrs[parts[0]]
	if mr == nil {
		return nil, 0, 0, fmt.Errorf("%s: no region %q", dv.name, parts[0])
	}
	var off, n uint64
	var err error
	if len(parts) > 1 {
		if off, err = strconv.ParseUint(parts[1], 0, 64); err != nil {
			return nil, 0, 0, err
		}
	}
	if len(parts) > 2 {
		if n, err = strconv.ParseUint(parts[2], 0, 32); err != nil {
			return nil, 0, 0, err
		}
	}
	return mr, mr.Addr + off, uint32(n), nil
}

func (h *harness) postSend(kv map[string]string, pos []string) error {
	dv, err := h.dev(pos[0])
	if err != nil {
		return err
	}
	id, _ := num(kv, "id", 0)
	ops := map[string]Opcode{"send": OpSend, "send_imm": OpSendImm, "write": OpWrite, "write_imm": OpWriteImm, "read": OpRead}
	op, ok := ops[kv["op"]]
	if !ok {
		return fmt.Errorf("op %q", kv["op"])
	}
	mr, addr, n, err := dv.sge(kv["local"])
	if err != nil {
		return err
	}
	wr := SendWR{ID: id, Op: op, Local: SGE{Addr: addr, Length: n, LKey: mr.LKey}, Signaled: !slices.Contains(pos, "unsignaled")}
	if r, ok := kv["remote"]; ok {
		rmr, raddr, _, err := dv.peer.sge(r)
		if err != nil {
			return err
		}
		wr.Remote, wr.RKey = raddr, rmr.RKey
	}
	if k, ok := kv["rkey"]; ok {
		v, err := strconv.ParseUint(k, 0, 32)
		if err != nil {
			return err
		}
		wr.RKey = uint32(v)
	}
	if k, ok := kv["lkey"]; ok {
		v, err := strconv.ParseUint(k, 0, 32)
		if err != nil {
			return err
		}
		wr.Local.LKey = uint32(v)
	}
	imm, _ := num(kv, "imm", 0)
	wr.Imm = uint32(imm)
	wr.Solicited = slices.Contains(pos, "solicited")
	return h.target(dv, pos).PostSend(wr)
}

func (h *harness) postRecv(kv map[string]string, pos []string) error {
	dv, err := h.dev(pos[0])
	if err != nil {
		return err
	}
	id, _ := num(kv, "id", 0)
	mr, addr, n, err := dv.sge(kv["local"])
	if err != nil {
		return err
	}
	lkey := mr.LKey
	if k, ok := kv["lkey"]; ok {
		v, err := strconv.ParseUint(k, 0, 32)
		if err != nil {
			return err
		}
		lkey = uint32(v)
	}
	return h.target(dv, pos).PostRecv(RecvWR{ID: id, Local: SGE{Addr: addr, Length: n, LKey: lkey}})
}

// target is the QP a post goes to: dev's connected QP, or the spare one.
func (h *harness) target(dv *tdev, pos []string) *QP {
	if slices.Contains(pos, "spare") && h.spare != nil {
		return h.spare
	}
	return dv.qp
}

func indexes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f == "" {
			continue
		}
		i, err := strconv.Atoi(f)
		if err != nil {
			return nil, err
		}
		out = append(out, i)
	}
	return out, nil
}

// deliverOne hands packet i of dv's outbox to its peer.
func (h *harness) deliverOne(dv *tdev, i int) {
	p := dv.out[i]
	dv.out = slices.Delete(dv.out, i, i+1)
	dv.peer.dev.Recv(dv.addr, p)
}

func (h *harness) deliver(kv map[string]string, pos []string) error {
	dv, err := h.dev(pos[0])
	if err != nil {
		return err
	}
	batch := dv.out
	dv.out = nil
	n, _ := num(kv, "n", uint64(len(batch)))
	n = min(n, uint64(len(batch)))
	rest := batch[n:]
	batch = batch[:n]
	drop, err := indexes(kv["drop"])
	if err != nil {
		return err
	}
	dup, err := indexes(kv["dup"])
	if err != nil {
		return err
	}
	order := make([]int, len(batch))
	for i := range order {
		order[i] = i
	}
	if slices.Contains(pos, "reverse") {
		slices.Reverse(order)
	}
	for _, i := range order {
		if slices.Contains(drop, i) {
			continue
		}
		times := 1
		if slices.Contains(dup, i) {
			times = 2
		}
		for range times {
			dv.peer.dev.Recv(dv.addr, bytes.Clone(batch[i]))
		}
	}
	dv.out = append(rest, dv.out...)
	return nil
}

func (h *harness) drop(pos []string) error {
	dv, err := h.dev(pos[0])
	if err != nil {
		return err
	}
	if len(pos) < 2 || pos[1] == "all" {
		fmt.Fprintf(&h.log, "dropped %d\n", len(dv.out))
		dv.out = nil
		return nil
	}
	idx, err := indexes(pos[1])
	if err != nil {
		return err
	}
	var keep [][]byte
	for i, p := range dv.out {
		if !slices.Contains(idx, i) {
			keep = append(keep, p)
		}
	}
	fmt.Fprintf(&h.log, "dropped %d\n", len(dv.out)-len(keep))
	dv.out = keep
	return nil
}

func (h *harness) corrupt(kv map[string]string, pos []string) error {
	dv, err := h.dev(pos[0])
	if err != nil {
		return err
	}
	i, err := strconv.Atoi(pos[1])
	if err != nil || i >= len(dv.out) {
		return fmt.Errorf("corrupt DEV INDEX")
	}
	b, _ := num(kv, "byte", uint64(len(dv.out[i])-5))
	dv.out[i][b] ^= 0x10
	return nil
}

// inject sends dev a packet built from the arguments, as if from its peer
// (or from=IP).
func (h *harness) inject(kv map[string]string, pos []string) error {
	dv, err := h.dev(pos[0])
	if err != nil {
		return err
	}
	var op wire.Opcode = 0xff
	for o := range 256 {
		if wire.Opcode(o).String() == kv["opcode"] {
			op = wire.Opcode(o)
		}
	}
	if !op.Known() {
		return fmt.Errorf("opcode %q", kv["opcode"])
	}
	var hdr wire.Header
	hdr.Opcode = op
	psn, _ := num(kv, "psn", 0)
	hdr.PSN = uint32(psn)
	qpn, _ := num(kv, "qp", uint64(dv.qp.QPN()))
	hdr.DestQP = uint32(qpn)
	pkey, _ := num(kv, "pkey", wire.DefaultPKey)
	hdr.PKey = uint16(pkey)
	rkey, _ := num(kv, "rkey", 0)
	va, _ := num(kv, "va", 0)
	length, _ := num(kv, "len", 0)
	hdr.RETH = wire.RETH{VA: va, RKey: uint32(rkey), Length: uint32(length)}
	syn, _ := num(kv, "syndrome", 0)
	hdr.AETH = wire.AETH{Syndrome: uint8(syn)}
	hdr.AckReq = slices.Contains(pos, "ackreq")
	n, _ := num(kv, "payload", 0)
	from := dv.peer.addr
	if f, ok := kv["from"]; ok {
		a, err := netip.ParseAddr(f)
		if err != nil {
			return err
		}
		from = netip.AddrPortFrom(a, wire.Port)
	}
	b := wire.Append(nil, &hdr, make([]byte, n), wire.HostPseudo(from, dv.addr))
	dv.dev.Recv(from, b)
	return nil
}

func (h *harness) tick(d time.Duration) {
	end := h.now + d
	for {
		slices.SortStableFunc(h.timers, func(x, y *fakeTimer) int {
			if x.at != y.at {
				return int(x.at - y.at)
			}
			return int(x.seq - y.seq)
		})
		if len(h.timers) == 0 || h.timers[0].at > end {
			break
		}
		t := h.timers[0]
		h.timers = h.timers[1:]
		if t.done {
			continue
		}
		t.done = true
		h.now = t.at
		t.f()
	}
	h.now = end
}

func (h *harness) transition(kv map[string]string) error {
	if h.spare == nil {
		return fmt.Errorf("no spare QP (create-qp)")
	}
	var a QPAttr
	var mask AttrMask
	for k, v := range kv {
		n, _ := strconv.ParseUint(v, 0, 64)
		switch k {
		case "state":
			st, err := parseState(v)
			if err != nil {
				return err
			}
			a.State, mask = st, mask|AttrState
		case "pkey":
			a.PKey, mask = uint16(n), mask|AttrPKey
		case "access":
			acc, err := parseAccess(v)
			if err != nil {
				return err
			}
			a.Access, mask = acc, mask|AttrAccess
		case "mtu":
			a.PathMTU, mask = int(n), mask|AttrPathMTU
		case "dest_qpn":
			a.DestQPN, mask = uint32(n), mask|AttrDestQPN
		case "remote":
			addr, err := netip.ParseAddr(v)
			if err != nil {
				return err
			}
			a.Remote, mask = addr, mask|AttrRemote
		case "rq_psn":
			a.RQPSN, mask = uint32(n), mask|AttrRQPSN
		case "rd_dest":
			a.MaxDestRdAtomic, mask = int(n), mask|AttrMaxDestRdAtomic
		case "min_rnr":
			a.MinRNRTimer, mask = uint8(n), mask|AttrMinRNRTimer
		case "sq_psn":
			a.SQPSN, mask = uint32(n), mask|AttrSQPSN
		case "timeout":
			a.Timeout, mask = uint8(n), mask|AttrTimeout
		case "retry":
			a.RetryCnt, mask = uint8(n), mask|AttrRetryCnt
		case "rnr_retry":
			a.RNRRetry, mask = uint8(n), mask|AttrRNRRetry
		case "rd":
			a.MaxRdAtomic, mask = int(n), mask|AttrMaxRdAtomic
		default:
			return fmt.Errorf("attribute %q", k)
		}
	}
	if err := h.spare.Modify(a, mask); err != nil {
		return err
	}
	fmt.Fprintf(&h.log, "qp %d %v\n", h.spare.QPN(), h.spare.State())
	return nil
}

func (h *harness) cmp(pos []string) error {
	if len(pos) != 7 {
		return fmt.Errorf("cmp DEV MR OFF DEV MR OFF LEN")
	}
	get := func(dev, mr, off string, n int) ([]byte, error) {
		dv, err := h.dev(dev)
		if err != nil {
			return nil, err
		}
		m := dv.mrs[mr]
		if m == nil {
			return nil, fmt.Errorf("no region %s on %s", mr, dev)
		}
		o, err := strconv.Atoi(off)
		if err != nil {
			return nil, err
		}
		return m.Buf[o : o+n], nil
	}
	n, err := strconv.Atoi(pos[6])
	if err != nil {
		return err
	}
	x, err := get(pos[0], pos[1], pos[2], n)
	if err != nil {
		return err
	}
	y, err := get(pos[3], pos[4], pos[5], n)
	if err != nil {
		return err
	}
	if bytes.Equal(x, y) {
		fmt.Fprintf(&h.log, "equal\n")
		return nil
	}
	diff := 0
	for i := range x {
		if x[i] != y[i] {
			diff++
		}
	}
	fmt.Fprintf(&h.log, "differ in %d of %d bytes\n", diff, n)
	return nil
}
