package ina

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"

	"github.com/tracebed/tracebed/emulator/frame"
	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/p4/fwd"
	"github.com/tracebed/tracebed/topologies"
)

// A vector file (testdata/vectors/*.json) is a switch program and a
// sequence of packets in with the packets expected out. It is shared by the
// Go pipeline (TestVectors) and ina.p4 on bmv2 (TestVectorsBMv2): both set
// up the switch from the file alone, through P4Runtime names.
type vectorFile struct {
	Name string `json:"name"`
	Doc  string `json:"doc"`
	// The switch is "tor" of a generated star of Hosts hosts (h1 on port 1,
	// …) with 8192 aggregators; workers listen on UDP port WorkerPort.
	Hosts      int             `json:"hosts"`
	WorkerPort uint16          `json:"worker_port"`
	Bindings   []vectorBinding `json:"bindings"`
	Groups     []vectorGroup   `json:"groups"`
	Steps      []vectorStep    `json:"steps"`
}

type vectorBinding struct {
	Job     uint16 `json:"job"`
	From    uint32 `json:"from"`
	To      uint32 `json:"to"`
	Mode    uint8  `json:"mode"`
	Gen     uint32 `json:"gen"`
	Base    uint32 `json:"base"`
	Size    uint32 `json:"size"`
	Workers uint8  `json:"workers"`
	Group   uint16 `json:"group"`
	PSHost  int    `json:"ps_host,omitempty"` // 0: none
	// Members and UpHost make the switch a lower switch of a two-level
	// tree: the workers it completes, and the host that plays the switch
	// above (its address, INA port). Hold is the shared-mode release rule.
	Members uint32 `json:"members,omitempty"`
	UpHost  int    `json:"up_host,omitempty"`
	Hold    uint8  `json:"hold,omitempty"`
	Place   uint8  `json:"place,omitempty"`
}

type vectorGroup struct {
	Group uint16 `json:"group"`
	Hosts []int  `json:"hosts"` // worker i on host Hosts[i]
	// Port is the members' UDP port: 0 means the file's worker port; the
	// INA port makes the hosts play the lower switches of a two-level tree.
	Port uint16 `json:"port,omitempty"`
}

type vectorStep struct {
	Doc    string         `json:"doc"`
	InPort int            `json:"in_port"`
	In     string         `json:"in"`
	Out    []vectorPacket `json:"out"`
}

type vectorPacket struct {
	Port  int    `json:"port"`
	Frame string `json:"frame"`
}

const vectorK = DefaultK

func vectorTopology(hosts int) (*topologies.Topology, error) {
	f, err := topologies.Generate(topologies.Params{Generate: "star", Name: "vectors", Hosts: hosts, Aggregators: 8192})
	if err != nil {
		return nil, err
	}
	return f.Build("vectors")
}

// program returns the P4Runtime updates that set the switch up for v, with
// ids looked up in names: routes and the local address, groups, bindings.
func (v *vectorFile) program(top *topologies.Topology, ctl *Controller) ([]*p4v1.Update, error) {
	ups, err := ctl.RouteUpdates(top, "tor")
	if err != nil {
		return nil, err
	}
	addr := func(h int) netip.AddrPort {
		return netip.AddrPortFrom(top.Node(fmt.Sprintf("h%d", h)).IP, v.WorkerPort)
	}
	for _, g := range v.Groups {
		var ws []netip.AddrPort
		for _, h := range g.Hosts {
			a := addr(h)
			if g.Port != 0 {
				a = netip.AddrPortFrom(a.Addr(), g.Port)
			}
			ws = append(ws, a)
		}
		ms, err := Members(top, "tor", ws)
		if err != nil {
			return nil, err
		}
		gu, err := ctl.GroupUpdates(p4v1.Update_INSERT, g.Group, ms)
		if err != nil {
			return nil, err
		}
		ups = append(ups, gu...)
	}
	for _, vb := range v.Bindings {
		b := Binding{Job: vb.Job, FromRound: vb.From, ToRound: vb.To, Mode: vb.Mode, Gen: vb.Gen, Base: vb.Base,
			Size: vb.Size, Workers: vb.Workers, Group: vb.Group, Members: vb.Members, Hold: vb.Hold, Place: vb.Place}
		if vb.PSHost != 0 {
			b.PS = addr(vb.PSHost)
		}
		if vb.UpHost != 0 {
			b.Up = addr(vb.UpHost).Addr()
		}
		te, err := b.Entry(ctl.Names())
		if err != nil {
			return nil, err
		}
		ups = append(ups, p4rt.Insert(p4rt.Table(te)))
	}
	return ups, nil
}

// vectorBuilder writes the steps of a scenario.
type vectorBuilder struct {
	v   *vectorFile
	top *topologies.Topology
	// want[i] is the number of frames step i must emit: the scenario's
	// own check of the semantics, so a golden file never records a bug.
	want []int
}

func newVector(name, doc string, hosts int) *vectorBuilder {
	top, err := vectorTopology(hosts)
	if err != nil {
		panic(err)
	}
	return &vectorBuilder{v: &vectorFile{Name: name, Doc: doc, Hosts: hosts, WorkerPort: 40000}, top: top}
}

func (b *vectorBuilder) host(h int) *topologies.Node { return b.top.Node(fmt.Sprintf("h%d", h)) }

// send adds a step: host h sends an INA packet to dst.
func (b *vectorBuilder) send(doc string, h int, dst netip.AddrPort, hd Header, vals []int32, want int) {
	b.sendFrom(doc, h, b.v.WorkerPort, dst, hd, vals, want)
}

// sendFrom is send from UDP port sport (the INA port: host h plays a
// switch of a two-level tree).
func (b *vectorBuilder) sendFrom(doc string, h int, sport uint16, dst netip.AddrPort, hd Header, vals []int32, want int) {
	b.raw(doc, h, b.frame(h, sport, dst, hd, vals), want)
}

func (b *vectorBuilder) frame(h int, sport uint16, dst netip.AddrPort, hd Header, vals []int32) []byte {
	src := b.host(h)
	return frame.AppendUDP(nil, frame.UDP{SrcMAC: src.MAC, DstMAC: src.Ports[0].Peer.MAC,
		Src: netip.AddrPortFrom(src.IP, sport), Dst: dst}, Append(nil, hd, vals))
}

func (b *vectorBuilder) raw(doc string, h int, f []byte, want int) {
	b.v.Steps = append(b.v.Steps, vectorStep{Doc: doc, InPort: b.host(h).Ports[0].Peer.Num, In: hex.EncodeToString(f)})
	b.want = append(b.want, want)
}

func (b *vectorBuilder) sw() netip.AddrPort { return netip.AddrPortFrom(b.top.Node("tor").IP, Port) }

func (b *vectorBuilder) data(doc string, job uint16, w, n uint8, slot uint16, ver uint8, round, off uint32, flags uint8, vals []int32, want int) {
	b.send(doc, int(w)+1, b.sw(), Header{Flags: FlagData | flags, Job: job, Slot: slot, Ver: ver, Worker: w, Workers: n,
		Round: round, Offset: off, Bitmap: 1 << w}, vals, want)
}

func ramp(base int32) []int32 {
	v := make([]int32, vectorK)
	for i := range v {
		v[i] = base + int32(i)*3
	}
	return v
}

// scenarios are the vector files' sources.
func scenarios() []*vectorBuilder {
	var out []*vectorBuilder

	p := newVector("pool", "SwitchML pool mode: aggregation, multicast, duplicates, shadow-copy answers, version flip, stale copies, overflow", 5)
	p.v.Bindings = []vectorBinding{{Job: 5, To: MaxRound, Mode: ModePool, Gen: 9, Base: 100, Size: 4, Workers: 3, Group: 1}}
	p.v.Groups = []vectorGroup{{Group: 1, Hosts: []int{1, 2, 3}}}
	p.data("worker 0 contributes chunk 0 in slot 2", 5, 0, 3, 2, 0, 7, 0, 0, ramp(1), 0)
	p.data("worker 0's duplicate is dropped", 5, 0, 3, 2, 0, 7, 0, 0, ramp(1), 0)
	p.data("worker 1 contributes", 5, 1, 3, 2, 0, 7, 0, 0, ramp(-50), 0)
	p.data("worker 2 completes the chunk: result multicast to 3 workers", 5, 2, 3, 2, 0, 7, 0, 0, ramp(1000), 3)
	p.data("worker 1 retransmits: answered alone from the cell", 5, 1, 3, 2, 0, 7, 0, FlagRetransmit, ramp(-50), 1)
	p.data("worker 0 sends the slot's next chunk with the version flipped", 5, 0, 3, 2, 1, 7, 4*vectorK, 0, ramp(5), 0)
	p.data("worker 2's late retransmission of chunk 0 is answered from the shadow copy", 5, 2, 3, 2, 0, 7, 0, FlagRetransmit, ramp(1000), 1)
	p.data("worker 1 sends chunk 8 in copy 0", 5, 1, 3, 2, 0, 7, 8*vectorK, 0, ramp(2), 0)
	p.data("a copy of chunk 0 is now stale: dropped", 5, 2, 3, 2, 0, 7, 0, 0, ramp(1000), 0)
	big := make([]int32, vectorK)
	for i := range big {
		big[i] = math.MaxInt32 - int32(i)
	}
	p.data("slot 0: worker 0 sends values near MaxInt32", 5, 0, 3, 0, 0, 7, 12*vectorK, 0, big, 0)
	p.data("slot 0: worker 1 adds", 5, 1, 3, 0, 0, 7, 12*vectorK, 0, ramp(1), 0)
	p.data("slot 0: worker 2 completes; the result is flagged overflow", 5, 2, 3, 0, 0, 7, 12*vectorK, 0, ramp(1), 3)
	out = append(out, p)

	s := newVector("shared", "ATP shared mode: hash placement, collisions and results to the PS, PS results multicast, flushes, retransmissions on a free cell", 5)
	s.v.Bindings = []vectorBinding{
		{Job: 7, To: MaxRound, Mode: ModeShared, Gen: 3, Base: 200, Size: 8, Workers: 2, Group: 1, PSHost: 5},
		{Job: 8, To: MaxRound, Mode: ModeShared, Gen: 4, Base: 200, Size: 8, Workers: 2, Group: 2, PSHost: 5},
	}
	s.v.Groups = []vectorGroup{{Group: 1, Hosts: []int{1, 2}}, {Group: 2, Hosts: []int{3, 4}}}
	var off uint32
	for off = vectorK; SharedIndex(8, off, 8) != SharedIndex(7, 0, 8); off += vectorK {
	}
	ps := netip.AddrPortFrom(s.host(5).IP, 40000)
	s.data("job 7 claims the aggregator of its chunk 0", 7, 0, 2, 0, 0, 0, 0, 0, ramp(10), 0)
	s.send("job 8's chunk hashes onto the same aggregator: collision, forwarded to the PS", 3, s.sw(),
		Header{Flags: FlagData, Job: 8, Worker: 0, Workers: 2, Offset: off, Bitmap: 1}, ramp(20), 1)
	s.data("job 7 completes: result to the PS, aggregator freed", 7, 1, 2, 0, 0, 0, 0, 0, ramp(30), 1)
	sum := make([]int32, vectorK)
	for i := range sum {
		sum[i] = ramp(10)[i] + ramp(30)[i]
	}
	s.send("the PS sends the result back: multicast to job 7's workers", 5, s.sw(),
		Header{Flags: FlagResult, Job: 7, Workers: 2, Bitmap: 3}, sum, 2)
	s.send("a result from a worker is not accepted", 1, s.sw(), Header{Flags: FlagResult, Job: 7, Workers: 2, Bitmap: 3}, sum, 0)
	s.data("a retransmission finds the cell free: to the PS, never claims it", 7, 0, 2, 0, 0, 0, 0, FlagRetransmit, ramp(10), 1)
	s.data("round 1: worker 0 claims the cell again", 7, 0, 2, 0, 0, 1, 0, 0, ramp(11), 0)
	s.data("worker 0 retransmits: the partial aggregate is flushed to the PS", 7, 0, 2, 0, 0, 1, 0, FlagRetransmit, ramp(11), 1)
	s.data("round 1 again: worker 1 claims the freed cell", 7, 1, 2, 0, 0, 1, 0, 0, ramp(12), 0)
	s.data("round 2: a newer round of the same binding reclaims the stale partial", 7, 0, 2, 0, 0, 2, 0, 0, ramp(13), 0)
	s.data("worker 1 completes round 2: result to the PS", 7, 1, 2, 0, 0, 2, 0, 0, ramp(14), 1)
	_ = ps
	out = append(out, s)

	e := newVector("errors", "drops and forwarding: malformed packets, unknown jobs, bad slots, inconsistent worker counts, transit traffic", 4)
	e.v.Bindings = []vectorBinding{{Job: 1, To: 9, Mode: ModePool, Gen: 1, Base: 0, Size: 2, Workers: 2, Group: 1},
		{Job: 1, From: 10, To: MaxRound, Mode: ModePool, Gen: 2, Base: 50, Size: 2, Workers: 2, Group: 1}}
	e.v.Groups = []vectorGroup{{Group: 1, Hosts: []int{1, 2}}}
	e.data("unknown job: dropped", 2, 0, 2, 0, 0, 0, 0, 0, ramp(1), 0)
	e.data("slot outside the pool: dropped", 1, 0, 2, 2, 0, 0, 0, 0, ramp(1), 0)
	e.data("worker count differs from the binding: dropped", 1, 0, 3, 0, 0, 0, 0, 0, ramp(1), 0)
	bad := Append(nil, Header{Flags: FlagData, Job: 1, Worker: 0, Workers: 2, Bitmap: 1}, ramp(1))
	bad[0] = 2
	src := e.host(1)
	e.raw("wrong protocol version: dropped as malformed", 1, frame.AppendUDP(nil, frame.UDP{SrcMAC: src.MAC, DstMAC: src.Ports[0].Peer.MAC,
		Src: netip.AddrPortFrom(src.IP, 40000), Dst: e.sw()}, bad), 0)
	bad = Append(nil, Header{Flags: FlagData, Job: 1, Worker: 1, Workers: 2, Bitmap: 1}, ramp(1))
	e.raw("data bitmap is not the sender's bit: dropped as malformed", 1, frame.AppendUDP(nil, frame.UDP{SrcMAC: src.MAC, DstMAC: src.Ports[0].Peer.MAC,
		Src: netip.AddrPortFrom(src.IP, 40000), Dst: e.sw()}, bad), 0)
	e.data("round 9 uses the first binding", 1, 0, 2, 1, 0, 9, 0, 0, ramp(1), 0)
	e.data("round 10 uses the second binding (another pool): no mixing with round 9", 1, 1, 2, 1, 0, 10, 0, 0, ramp(2), 0)
	e.data("round 9 completes in the first pool", 1, 1, 2, 1, 0, 9, 0, 0, ramp(3), 2)
	dst := e.host(3)
	e.raw("transit UDP traffic is forwarded", 1, frame.AppendUDP(nil, frame.UDP{SrcMAC: src.MAC, DstMAC: src.Ports[0].Peer.MAC,
		Src: netip.AddrPortFrom(src.IP, 40000), Dst: netip.AddrPortFrom(dst.IP, 9)}, []byte("not aggregated")), 1)
	e.raw("INA packets for another address are forwarded, not aggregated", 1, frame.AppendUDP(nil, frame.UDP{SrcMAC: src.MAC, DstMAC: src.Ports[0].Peer.MAC,
		Src: netip.AddrPortFrom(src.IP, 40000), Dst: netip.AddrPortFrom(dst.IP, Port)}, Append(nil, Header{Flags: FlagData, Job: 1, Workers: 2, Bitmap: 1}, ramp(1))), 1)
	e.raw("other traffic to the switch is dropped", 1, frame.AppendUDP(nil, frame.UDP{SrcMAC: src.MAC, DstMAC: src.Ports[0].Peer.MAC,
		Src: netip.AddrPortFrom(src.IP, 40000), Dst: netip.AddrPortFrom(e.top.Node("tor").IP, 53)}, []byte("dns?")), 0)
	corrupt := e.frame(1, 40000, e.sw(), Header{Flags: FlagData, Job: 1, Worker: 0, Workers: 2, Round: 11, Bitmap: 1}, ramp(7))
	corrupt[len(corrupt)-2] ^= 0x20
	e.raw("a value bit flipped on the way: the UDP checksum fails, dropped (checksum), never aggregated", 1, corrupt, 0)
	unchecked := e.frame(1, 40000, e.sw(), Header{Flags: FlagData, Job: 1, Worker: 0, Workers: 2, Round: 11, Bitmap: 1}, ramp(7))
	frame.ClearUDPChecksum(unchecked)
	e.raw("no UDP checksum (zero): dropped (checksum)", 1, unchecked, 0)
	e.data("round 11: the intact copy is aggregated, alone", 1, 1, 2, 0, 0, 11, 0, 0, ramp(8), 0)
	e.raw("not IPv4 (ARP): dropped (not_ipv4)", 1, append(append([]byte{}, src.Ports[0].Peer.MAC[:]...), append(src.MAC[:], 0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1)...), 0)
	e.raw("transit to an address with no route: dropped (no_route)", 1, frame.AppendUDP(nil, frame.UDP{SrcMAC: src.MAC, DstMAC: src.Ports[0].Peer.MAC,
		Src: netip.AddrPortFrom(src.IP, 40000), Dst: netip.MustParseAddrPort("192.0.2.1:9")}, []byte("nowhere")), 0)
	e.raw("transit with TTL 1: dropped (ttl)", 1, frame.AppendUDP(nil, frame.UDP{SrcMAC: src.MAC, DstMAC: src.Ports[0].Peer.MAC,
		Src: netip.AddrPortFrom(src.IP, 40000), Dst: netip.AddrPortFrom(dst.IP, 9), TTL: 1}, []byte("expiring")), 0)
	out = append(out, e)

	out = append(out, lowerScenario(), topScenario(), slotScenario())
	return out
}

// slotScenario is shared mode with aggregators named by the packets'
// slot field (ATP's slot remapping): the parameter server's result names
// the aggregator the collided slot moves to.
func slotScenario() *vectorBuilder {
	v := newVector("shared-slot", "ATP's slot remapping: the aggregator is the packet's slot modulo the pool; a collided chunk's result from the PS names the slot's new aggregator, which the next chunk uses", 5)
	v.v.Bindings = []vectorBinding{
		{Job: 7, To: MaxRound, Mode: ModeShared, Gen: 3, Base: 200, Size: 8, Workers: 2, Group: 1, PSHost: 5, Place: PlaceSlot},
		{Job: 8, To: MaxRound, Mode: ModeShared, Gen: 4, Base: 200, Size: 8, Workers: 2, Group: 2, PSHost: 5, Place: PlaceSlot},
	}
	v.v.Groups = []vectorGroup{{Group: 1, Hosts: []int{1, 2}}, {Group: 2, Hosts: []int{3, 4}}}
	d := func(doc string, job uint16, w uint8, slot uint16, off uint32, want int) {
		v.send(doc, int(w)+1+2*int(job-7), v.sw(), Header{Flags: FlagData, Job: job, Slot: slot, Worker: w, Workers: 2, Offset: off, Bitmap: 1 << w}, ramp(int32(job)), want)
	}
	d("job 7 slot 11 claims aggregator 3 (11 mod 8)", 7, 0, 11, 0, 0)
	d("job 8 names aggregator 3 too: collision, to the PS", 8, 0, 3, 0, 1)
	d("job 7 completes: the result goes to the PS, naming aggregator 11", 7, 1, 11, 0, 1)
	v.send("the PS returns job 8's result, naming aggregator 5 for that slot: multicast to job 8's workers", 5, v.sw(),
		Header{Flags: FlagResult, Job: 8, Slot: 5, Workers: 2, Bitmap: 3}, ramp(16), 2)
	d("job 8's next chunk in that slot uses aggregator 5", 8, 0, 5, 4*vectorK, 0)
	d("and completes there: the result to the PS", 8, 1, 5, 4*vectorK, 1)
	return v
}

// lowerScenario is a rack's ToR in a two-level tree: host 5 plays the
// switch above (the spine).
func lowerScenario() *vectorBuilder {
	l := newVector("twolevel-lower", "two-level aggregation at a rack's ToR: the rack's partial up, retransmissions resend it, the result from above kept and multicast; shared mode with release on return", 5)
	l.v.Bindings = []vectorBinding{
		{Job: 3, To: MaxRound, Mode: ModePool, Gen: 5, Base: 10, Size: 4, Workers: 4, Group: 1, Members: 0b0011, UpHost: 5},
		{Job: 4, To: MaxRound, Mode: ModeShared, Gen: 6, Base: 40, Size: 8, Workers: 4, Group: 1, Members: 0b0011, UpHost: 5, PSHost: 4, Hold: HoldReturn},
		{Job: 6, To: MaxRound, Mode: ModeShared, Gen: 7, Base: 40, Size: 8, Workers: 2, Group: 2, PSHost: 4},
	}
	l.v.Groups = []vectorGroup{{Group: 1, Hosts: []int{1, 2}}, {Group: 2, Hosts: []int{1, 2}}}
	spine := 5
	l.data("worker 0 (this rack) contributes chunk 0 in slot 1", 3, 0, 4, 1, 0, 2, 0, 0, ramp(1), 0)
	l.data("worker 1 completes the rack: one partial (bitmap 0b0011) goes up to the spine", 3, 1, 4, 1, 0, 2, 0, 0, ramp(100), 1)
	l.data("worker 0's copy of its data is a duplicate: dropped", 3, 0, 4, 1, 0, 2, 0, 0, ramp(1), 0)
	l.data("worker 1 retransmits (no result came back): the partial is sent up again", 3, 1, 4, 1, 0, 2, 0, FlagRetransmit, ramp(100), 1)
	l.send("worker 2 belongs to another rack: dropped (inconsistent)", 3, l.sw(), Header{Flags: FlagData, Job: 3, Slot: 1, Worker: 2, Workers: 4, Round: 2, Bitmap: 4}, ramp(5), 0)
	total := make([]int32, vectorK)
	for i := range total {
		total[i] = ramp(1)[i] + ramp(100)[i] + ramp(1000)[i] + ramp(2000)[i]
	}
	l.sendFrom("the spine's result: kept in the cell and multicast to the rack", spine, Port, l.sw(),
		Header{Flags: FlagResult, Job: 3, Slot: 1, Workers: 4, Round: 2, Bitmap: 0b1111}, total, 2)
	l.data("worker 0 retransmits: answered alone from the kept result", 3, 0, 4, 1, 0, 2, 0, FlagRetransmit, ramp(1), 1)
	l.send("a result from a worker, not the spine: dropped (not_from_ps)", 3, l.sw(),
		Header{Flags: FlagResult, Job: 3, Slot: 1, Workers: 4, Round: 2, Bitmap: 0b1111}, total, 0)
	var off uint32
	for off = vectorK; SharedIndex(6, off, 8) != SharedIndex(4, 0, 8); off += vectorK {
	}
	l.data("shared: worker 0 claims the aggregator of chunk 0", 4, 0, 4, 0, 0, 0, 0, 0, ramp(3), 0)
	l.data("shared: worker 1 completes the rack: the partial goes up, the cell stays held (release on return)", 4, 1, 4, 0, 0, 0, 0, 0, ramp(4), 1)
	l.send("another job's chunk on the held aggregator: collision, to its PS", 1, l.sw(),
		Header{Flags: FlagData, Job: 6, Worker: 0, Workers: 2, Offset: off, Bitmap: 1}, ramp(9), 1)
	l.data("shared: worker 0 retransmits: the held partial goes up again", 4, 0, 4, 0, 0, 0, 0, FlagRetransmit, ramp(3), 1)
	l.sendFrom("shared: the result comes back from the spine: the cell is released, the result multicast", spine, Port, l.sw(),
		Header{Flags: FlagResult, Job: 4, Workers: 4, Bitmap: 0b1111}, ramp(77), 2)
	l.send("the other job's chunk now claims the released aggregator", 1, l.sw(),
		Header{Flags: FlagData, Job: 6, Worker: 0, Workers: 2, Offset: off, Bitmap: 1}, ramp(9), 0)
	l.data("shared: a retransmission whose chunk is gone goes up, never to a cell", 4, 1, 4, 0, 0, 0, 0, FlagRetransmit, ramp(4), 1)
	return l
}

// topScenario is the top of a two-level tree: hosts 1 and 2 play the
// racks' ToRs (sending from the INA port), host 5 the parameter server.
func topScenario() *vectorBuilder {
	t := newVector("twolevel-top", "two-level aggregation at the top: the racks' partials aggregated, the result multicast to the ToRs, a resent partial answered; shared mode with release on return", 5)
	t.v.Bindings = []vectorBinding{
		{Job: 3, To: MaxRound, Mode: ModePool, Gen: 5, Base: 0, Size: 4, Workers: 4, Group: 1},
		{Job: 4, To: MaxRound, Mode: ModeShared, Gen: 6, Base: 100, Size: 8, Workers: 4, Group: 1, PSHost: 5, Hold: HoldReturn},
	}
	t.v.Groups = []vectorGroup{{Group: 1, Hosts: []int{1, 2}, Port: Port}}
	part := func(doc string, tor int, job uint16, bitmap uint32, flags uint8, vals []int32, want int) {
		t.sendFrom(doc, tor, Port, t.sw(), Header{Flags: FlagPartial | flags, Job: job, Slot: 3, Ver: 1, Worker: 0, Workers: 4, Round: 5, Offset: 7 * vectorK, Bitmap: bitmap}, vals, want)
	}
	part("rack 1's partial (workers 0, 1)", 1, 3, 0b0011, 0, ramp(10), 0)
	part("its copy: dropped (duplicate)", 1, 3, 0b0011, 0, ramp(10), 0)
	part("rack 2's partial completes the chunk: the result is multicast to both ToRs", 2, 3, 0b1100, 0, ramp(20), 2)
	part("rack 1 resends its partial (its result was lost): answered to that ToR alone", 1, 3, 0b0011, FlagRetransmit, ramp(10), 1)
	t.send("a data packet from a worker: aggregated like a one-worker partial (job 3, chunk 8)", 3, t.sw(),
		Header{Flags: FlagData, Job: 3, Slot: 0, Worker: 2, Workers: 4, Round: 5, Offset: 8 * vectorK, Bitmap: 4}, ramp(1), 0)
	part("shared: rack 1's partial claims its aggregator", 1, 4, 0b0011, 0, ramp(30), 0)
	part("shared: rack 2 completes the chunk: the result goes to the PS, the aggregator stays held", 2, 4, 0b1100, 0, ramp(40), 1)
	part("shared: rack 1 resends (the result is late): the result goes to the PS again", 1, 4, 0b0011, FlagRetransmit, ramp(30), 1)
	sum := make([]int32, vectorK)
	for i := range sum {
		sum[i] = ramp(30)[i] + ramp(40)[i]
	}
	t.send("shared: the PS returns the result: the aggregator is released, the result multicast to the ToRs", 5, t.sw(),
		Header{Flags: FlagResult, Job: 4, Workers: 4, Round: 5, Offset: 7 * vectorK, Bitmap: 0b1111}, sum, 2)
	part("shared: a resent partial finds its aggregator free: on to the PS, never claims it", 2, 4, 0b1100, FlagRetransmit, ramp(40), 1)
	return t
}

// goDevice builds the Go pipeline for a vector file, programmed from the file.
func goDevice(v *vectorFile) (*Pipeline, error) {
	top, err := vectorTopology(v.Hosts)
	if err != nil {
		return nil, err
	}
	sw := top.Node("tor")
	p, err := New(Config{K: vectorK, Aggregators: sw.Aggregators}, fwd.New(sw, top.Routes()["tor"]))
	if err != nil {
		return nil, err
	}
	ctl, err := NewController(p4rt.Local(p))
	if err != nil {
		return nil, err
	}
	ups, err := v.program(top, ctl)
	if err != nil {
		return nil, err
	}
	return p, ctl.Client().Write(context.Background(), ups...)
}

// run replays the steps on the Go pipeline and returns what each emitted,
// sorted by port (copies on different ports have no order).
func runGo(p *Pipeline, v *vectorFile) ([][]vectorPacket, error) {
	var outs [][]vectorPacket
	for i, st := range v.Steps {
		f, err := hex.DecodeString(st.In)
		if err != nil {
			return nil, fmt.Errorf("step %d: %w", i, err)
		}
		var c capture
		p.Process(0, st.InPort, f, &c)
		var got []vectorPacket
		for _, e := range c.out {
			got = append(got, vectorPacket{Port: e.Port, Frame: hex.EncodeToString(e.Frame)})
		}
		sortPackets(got)
		outs = append(outs, got)
	}
	return outs, nil
}

func sortPackets(ps []vectorPacket) {
	slices.SortStableFunc(ps, func(a, b vectorPacket) int { return a.Port - b.Port })
}

func loadVectors(t *testing.T) []*vectorFile {
	t.Helper()
	paths, err := filepath.Glob("testdata/vectors/*.json")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no vector files (%v): run go test ./p4/ina -update", err)
	}
	var vs []*vectorFile
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		v := &vectorFile{}
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		vs = append(vs, v)
	}
	return vs
}

// TestVectorsGenerate builds the vector files from the scenarios: each step
// must emit the number of frames the scenario says (the semantics), and the
// frames themselves are the golden record (-update rewrites them).
func TestVectorsGenerate(t *testing.T) {
	for _, sc := range scenarios() {
		t.Run(sc.v.Name, func(t *testing.T) {
			p, err := goDevice(sc.v)
			if err != nil {
				t.Fatal(err)
			}
			outs, err := runGo(p, sc.v)
			if err != nil {
				t.Fatal(err)
			}
			for i, o := range outs {
				if len(o) != sc.want[i] {
					t.Errorf("step %d (%s): %d frames out, the scenario wants %d", i, sc.v.Steps[i].Doc, len(o), sc.want[i])
				}
				sc.v.Steps[i].Out = o
				if o == nil {
					sc.v.Steps[i].Out = []vectorPacket{}
				}
			}
			b, err := json.MarshalIndent(sc.v, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			golden(t, filepath.Join("testdata", "vectors", sc.v.Name+".json"), append(b, '\n'))
		})
	}
}

// TestVectors replays every vector file on a Go pipeline set up from the
// file alone: the outputs must match byte for byte.
func TestVectors(t *testing.T) {
	for _, v := range loadVectors(t) {
		t.Run(v.Name, func(t *testing.T) {
			p, err := goDevice(v)
			if err != nil {
				t.Fatal(err)
			}
			outs, err := runGo(p, v)
			if err != nil {
				t.Fatal(err)
			}
			for i, st := range v.Steps {
				want := slices.Clone(st.Out)
				sortPackets(want)
				if !slices.Equal(outs[i], want) {
					t.Errorf("step %d (%s):\n got %v\nwant %v", i, st.Doc, outs[i], want)
				}
			}
		})
	}
}

// TestVectorsCountEveryFrame: after each vector file, the switch's frame
// accounting, read through P4Runtime, counts every frame in exactly once.
func TestVectorsCountEveryFrame(t *testing.T) {
	for _, v := range loadVectors(t) {
		t.Run(v.Name, func(t *testing.T) {
			p, err := goDevice(v)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := runGo(p, v); err != nil {
				t.Fatal(err)
			}
			ctl, err := NewController(p4rt.Local(p))
			if err != nil {
				t.Fatal(err)
			}
			fc, err := ctl.FrameCounts(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if fc.Total() != uint64(len(v.Steps)) {
				t.Errorf("%d frames in, accounted %d: %+v", len(v.Steps), fc.Total(), fc)
			}
		})
	}
}
