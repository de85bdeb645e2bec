//go:build linux && !nonetns

package lab

import (
	"context"
	"fmt"
	"io"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"

	"github.com/tracebed/tracebed/emulator/p4rt"
)

// Counter is one cell of a P4Runtime counter.
type Counter struct {
	Name    string // e.g. tracebed.port_rx, ingress.forwarded
	Index   int64
	Packets int64
	Bytes   int64
}

// Counters reads every cell of every counter the switch's running
// pipeline declares, over P4Runtime (a Read of each counter with no index,
// the spec's wildcard), in P4Info order. It connects as a backup
// controller (election id 1), so it never takes over from the controller
// that programs the switch.
func (r *Run) Counters(ctx context.Context, sw string) ([]Counter, error) {
	s, ok := r.State.Switches[sw]
	if !ok {
		if n := r.Net.Topology.Node(sw); n != nil && !n.IsHost() {
			return nil, badInput("switch %s runs no switch process (a Linux bridge): no P4Runtime counters", sw)
		}
		return nil, badInput("no switch %q in run %s", sw, r.State.RunID)
	}
	dev := s.DeviceID
	if dev == 0 {
		dev = 1
	}
	c, err := p4rt.Dial(ctx, s.Socket, p4rt.DialOptions{DeviceID: dev, Backup: true})
	if err != nil {
		return nil, fmt.Errorf("switch %s: %w", sw, err)
	}
	defer c.Close()
	info := c.P4Info()
	if info == nil {
		return nil, fmt.Errorf("switch %s runs no pipeline yet", sw)
	}
	var out []Counter
	for _, ct := range info.GetCounters() {
		name := ct.GetPreamble().GetName()
		es, err := c.Read(ctx, &p4v1.Entity{Entity: &p4v1.Entity_CounterEntry{CounterEntry: &p4v1.CounterEntry{CounterId: ct.GetPreamble().GetId()}}})
		if err != nil {
			return nil, fmt.Errorf("switch %s: read %s: %w", sw, name, err)
		}
		for _, e := range es {
			ce := e.GetCounterEntry()
			out = append(out, Counter{Name: name, Index: ce.GetIndex().GetIndex(),
				Packets: ce.GetData().GetPacketCount(), Bytes: ce.GetData().GetByteCount()})
		}
	}
	return out, nil
}

// WriteCounters prints counters as a table, one cell a line; with all
// false only the cells that are not zero.
func WriteCounters(w io.Writer, cs []Counter, all bool) {
	width := len("COUNTER")
	for _, c := range cs {
		width = max(width, len(c.Name)+2+len(fmt.Sprint(c.Index)))
	}
	fmt.Fprintf(w, "%-*s %12s %14s\n", width, "COUNTER", "PACKETS", "BYTES")
	shown := 0
	for _, c := range cs {
		if !all && c.Packets == 0 && c.Bytes == 0 {
			continue
		}
		shown++
		fmt.Fprintf(w, "%-*s %12d %14d\n", width, fmt.Sprintf("%s[%d]", c.Name, c.Index), c.Packets, c.Bytes)
	}
	if shown == 0 {
		fmt.Fprintln(w, "(every counter is zero)")
	}
}
