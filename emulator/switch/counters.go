//go:build linux && !nonetns

package goswitch

import (
	"context"
	"errors"
	"strings"
	"time"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tracebed/tracebed/emulator/p4rt"
)

// The switch's own counters, indexed by port number, served next to the
// program's entities under these P4Info names (ids in a range p4c does not
// hand out for v1model programs of this size).
const (
	CounterPortRx     uint32 = 0x12ff0001 // tracebed.port_rx: frames, bytes received
	CounterPortTx     uint32 = 0x12ff0002 // tracebed.port_tx: frames, bytes sent
	CounterPortDrops  uint32 = 0x12ff0003 // tracebed.port_queue_drops: drop-tail
	CounterPortLost   uint32 = 0x12ff0004 // tracebed.port_lost: injected loss
	CounterPortErrors uint32 = 0x12ff0005 // tracebed.port_errors: oversize, receive and send errors, kernel drops
	CounterPortQueue  uint32 = 0x12ff0006 // tracebed.port_max_queue: bytes = largest backlog seen
	CounterSwitch     uint32 = 0x12ff0007 // tracebed.switch_drops: 0 pipeline panics, 1 bad egress port, 2 frames for the controller not delivered

	switchPrefix = "tracebed."

	switchDropCells = 3 // cells of tracebed.switch_drops
)

var switchCounters = []struct {
	id         uint32
	name, doc  string
	unit       p4configv1.CounterSpec_Unit
	portIndexd bool
}{
	{CounterPortRx, "port_rx", "frames and bytes received, by port", p4configv1.CounterSpec_BOTH, true},
	{CounterPortTx, "port_tx", "frames and bytes sent, by port", p4configv1.CounterSpec_BOTH, true},
	{CounterPortDrops, "port_queue_drops", "frames dropped at a full egress queue (drop-tail), by port", p4configv1.CounterSpec_BOTH, true},
	{CounterPortLost, "port_lost", "frames lost by injected loss, by port", p4configv1.CounterSpec_PACKETS, true},
	{CounterPortErrors, "port_errors", "frames dropped for length, refused by the kernel, or dropped by the kernel because the switch fell behind, by port", p4configv1.CounterSpec_PACKETS, true},
	{CounterPortQueue, "port_max_queue", "byte_count: largest egress backlog seen, by port", p4configv1.CounterSpec_BYTES, true},
	{CounterSwitch, "switch_drops", "0: pipeline panics, 1: frames emitted to a port that does not exist, 2: frames for the controller (packet-in) not delivered: no primary controller, its stream full, or shorter than the packet_in header", p4configv1.CounterSpec_PACKETS, false},
}

// switchDevice is the device the P4Runtime server programs: the running
// program's, plus the switch's counters. It must be used on the data-plane
// goroutine.
type switchDevice struct {
	sw  *Switch
	dev p4rt.Device
}

// P4Info returns the program's P4Info with the switch counters added.
func (d *switchDevice) P4Info() *p4configv1.P4Info {
	info := proto.Clone(d.dev.P4Info()).(*p4configv1.P4Info)
	for _, c := range switchCounters {
		size := int64(len(d.sw.ports))
		if !c.portIndexd {
			size = switchDropCells
		}
		info.Counters = append(info.Counters, &p4configv1.Counter{
			Preamble: &p4configv1.Preamble{Id: c.id, Name: switchPrefix + c.name, Alias: c.name, Doc: &p4configv1.Documentation{Brief: c.doc}},
			Spec:     &p4configv1.CounterSpec{Unit: c.unit},
			Size:     size,
		})
	}
	return info
}

// stripSwitchObjects returns info without the switch's own counters, so a
// controller may push back the P4Info it read.
func stripSwitchObjects(info *p4configv1.P4Info) *p4configv1.P4Info {
	has := false
	for _, c := range info.GetCounters() {
		has = has || strings.HasPrefix(c.GetPreamble().GetName(), switchPrefix)
	}
	if !has {
		return info
	}
	out := proto.Clone(info).(*p4configv1.P4Info)
	out.Counters = nil
	for _, c := range info.GetCounters() {
		if !strings.HasPrefix(c.GetPreamble().GetName(), switchPrefix) {
			out.Counters = append(out.Counters, c)
		}
	}
	return out
}

func isSwitchCounter(id uint32) bool { return id&0xffff0000 == 0x12ff0000 }

// Write implements p4rt.Device: updates of the switch's own counters are
// PERMISSION_DENIED, the others go to the program, and the statuses come
// back in the batch's order.
func (d *switchDevice) Write(updates []*p4v1.Update) error {
	var mine []int // indices of the updates for the switch's counters
	for i, u := range updates {
		if c := u.GetEntity().GetCounterEntry(); c != nil && isSwitchCounter(c.GetCounterId()) {
			mine = append(mine, i)
		}
	}
	if len(mine) == 0 {
		return d.dev.Write(updates)
	}
	errs := make([]error, len(updates))
	var rest []*p4v1.Update
	var restIdx []int
	for i, u := range updates {
		if len(mine) > 0 && mine[0] == i {
			mine = mine[1:]
			errs[i] = status.Error(codes.PermissionDenied, "the switch's own counters are read-only")
			continue
		}
		rest, restIdx = append(rest, u), append(restIdx, i)
	}
	if err := d.dev.Write(rest); err != nil {
		var be *p4rt.BatchError
		if !errors.As(err, &be) || len(be.Errs) != len(rest) {
			return err
		}
		for j, e := range be.Errs {
			errs[restIdx[j]] = e
		}
	}
	return &p4rt.BatchError{Kind: "update", Errs: errs}
}

// Read implements p4rt.Device.
func (d *switchDevice) Read(q *p4v1.Entity, yield func(*p4v1.Entity) error) error {
	c := q.GetCounterEntry()
	if c == nil {
		return d.dev.Read(q, yield)
	}
	if c.GetCounterId() != 0 && !isSwitchCounter(c.GetCounterId()) {
		return d.dev.Read(q, yield)
	}
	if c.GetCounterId() == 0 {
		// Every counter: the program's, then the switch's.
		if err := d.dev.Read(q, yield); err != nil && status.Code(err) != codes.NotFound && status.Code(err) != codes.Unimplemented {
			return err
		}
	}
	found := false
	for _, sc := range switchCounters {
		if c.GetCounterId() != 0 && c.GetCounterId() != sc.id {
			continue
		}
		found = true
		n := len(d.sw.ports)
		if !sc.portIndexd {
			n = switchDropCells
		}
		for i := range n {
			if c.GetIndex() != nil && c.GetIndex().GetIndex() != int64(i) {
				continue
			}
			data := d.counter(sc.id, i)
			e := &p4v1.CounterEntry{CounterId: sc.id, Index: &p4v1.Index{Index: int64(i)}, Data: data}
			if err := yield(&p4v1.Entity{Entity: &p4v1.Entity_CounterEntry{CounterEntry: e}}); err != nil {
				return err
			}
		}
	}
	if !found {
		return status.Errorf(codes.NotFound, "no counter with id %#x", c.GetCounterId())
	}
	return nil
}

func (d *switchDevice) counter(id uint32, i int) *p4v1.CounterData {
	if id == CounterSwitch {
		v := [switchDropCells]uint64{d.sw.panics, d.sw.badPort, d.sw.cpuDrops}[i]
		return &p4v1.CounterData{PacketCount: int64(v)}
	}
	if i == 0 || i >= len(d.sw.ports) {
		return &p4v1.CounterData{} // port 0 does not exist
	}
	st := d.sw.ports[i].snapshot()
	switch id {
	case CounterPortRx:
		return &p4v1.CounterData{PacketCount: int64(st.RxPackets), ByteCount: int64(st.RxBytes)}
	case CounterPortTx:
		return &p4v1.CounterData{PacketCount: int64(st.TxPackets), ByteCount: int64(st.TxBytes)}
	case CounterPortDrops:
		return &p4v1.CounterData{PacketCount: int64(st.QueueDrops)}
	case CounterPortLost:
		return &p4v1.CounterData{PacketCount: int64(st.Lost)}
	case CounterPortErrors:
		return &p4v1.CounterData{PacketCount: int64(st.RxOversize + st.RxErrors + st.TxErrors + st.RxKernelDrops)}
	case CounterPortQueue:
		return &p4v1.CounterData{ByteCount: st.MaxQueueBytes}
	}
	return &p4v1.CounterData{}
}

// Stats are a switch's counters at one moment.
type Stats struct {
	Ports          []PortStats // indexed by port number; Ports[0] is zero
	PipelinePanics uint64
	BadEgressPort  uint64
	Wakeups        uint64 // rounds of the data-plane loop
	// CPU is the CPU time (user and system) the data-plane thread has
	// used, including the kernel's work done in its system calls
	// (sending a frame runs the receiving end of a veth in the sender's
	// context); zero when Stats is called before Run.
	CPU time.Duration
}

// Sub returns the counters accumulated since earlier: every count and the
// CPU time as differences; queue levels (QueueBytes, MaxQueueBytes) as of
// st.
func (st Stats) Sub(earlier Stats) Stats {
	d := st
	d.Ports = make([]PortStats, len(st.Ports))
	for i, p := range st.Ports {
		if i < len(earlier.Ports) {
			p = p.sub(earlier.Ports[i])
		}
		d.Ports[i] = p
	}
	d.PipelinePanics -= earlier.PipelinePanics
	d.BadEgressPort -= earlier.BadEgressPort
	d.Wakeups -= earlier.Wakeups
	d.CPU -= earlier.CPU
	return d
}

// Stats returns the switch's counters (taken on the data-plane goroutine).
func (s *Switch) Stats(ctx context.Context) (Stats, error) {
	var st Stats
	err := s.Do(ctx, func() { st = s.stats() })
	return st, err
}

func (s *Switch) stats() Stats {
	st := Stats{Ports: make([]PortStats, len(s.ports)), PipelinePanics: s.panics, BadEgressPort: s.badPort, Wakeups: s.wakeups}
	if s.loopThread {
		st.CPU = ThreadCPU()
	}
	for i, p := range s.ports {
		if p != nil {
			st.Ports[i] = p.snapshot()
		}
	}
	return st
}

// ThreadCPU returns the CPU time (user and system) the calling OS thread
// has used; the caller must be locked to its thread (runtime.LockOSThread)
// for the figure to mean anything.
func ThreadCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
