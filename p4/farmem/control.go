package farmem

import (
	"context"
	"fmt"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"

	"github.com/tracebed/tracebed/emulator/p4rt"
)

// Rule maps one (message type, urgency) class to an egress priority.
type Rule struct {
	Type     Type  `json:"type"`
	Urgency  uint8 `json:"urgency"`  // 0 to MaxUrgency
	Priority uint8 `json:"priority"` // 0 (lowest) to 7
}

// Program replaces the classify table of the switch behind c with rules:
// it deletes every entry the table holds, then inserts one per rule. Ids are
// looked up by name in the switch's P4Info, so the same call programs the
// Go pipeline, the Go switch and bmv2.
func Program(ctx context.Context, c p4rt.Client, rules []Rule) error {
	names, err := p4rt.NewNames(c.P4Info())
	if err != nil {
		return err
	}
	q, err := names.TableQuery(TableClassify)
	if err != nil {
		return err
	}
	old, err := c.Read(ctx, q)
	if err != nil {
		return fmt.Errorf("read %s: %w", TableClassify, err)
	}
	var updates []*p4v1.Update
	for _, e := range old {
		te := e.GetTableEntry()
		updates = append(updates, p4rt.Delete(p4rt.Table(&p4v1.TableEntry{TableId: te.TableId, Match: te.Match, Priority: te.Priority})))
	}
	seen := map[int]bool{}
	for _, r := range rules {
		if r.Type == 0 || r.Type >= NumTypes || r.Urgency > MaxUrgency || r.Priority > 7 {
			return fmt.Errorf("farmem rule %+v: want a type 1-4, urgency 0-%d and priority 0-7", r, MaxUrgency)
		}
		if seen[Class(r.Type, r.Urgency)] {
			return fmt.Errorf("farmem rule for %s urgency %d given twice", r.Type, r.Urgency)
		}
		seen[Class(r.Type, r.Urgency)] = true
		te, err := names.TableEntry(TableClassify,
			[]p4rt.Match{p4rt.Exact(FieldType, uint64(r.Type)), p4rt.Exact(FieldUrgency, uint64(r.Urgency))},
			ActionSetPriority, []p4rt.Arg{p4rt.P(ParamPrio, uint64(r.Priority))}, 0)
		if err != nil {
			return err
		}
		updates = append(updates, p4rt.Insert(p4rt.Table(te)))
	}
	if len(updates) == 0 {
		return nil
	}
	return c.Write(ctx, updates...)
}

// ClassCounts are the far-memory counters of a switch.
type ClassCounts struct {
	Packets, Bytes [NumClasses]uint64 // by Class(type, urgency)
	Stats          [NumStats]uint64
}

// ReadCounts reads the far-memory counters of the switch behind c.
func ReadCounts(ctx context.Context, c p4rt.Client) (ClassCounts, error) {
	var out ClassCounts
	names, err := p4rt.NewNames(c.P4Info())
	if err != nil {
		return out, err
	}
	qc, err := names.CounterQuery(CounterClass, -1)
	if err != nil {
		return out, err
	}
	qs, err := names.CounterQuery(CounterStats, -1)
	if err != nil {
		return out, err
	}
	idClass, _ := names.CounterID(CounterClass)
	ents, err := c.Read(ctx, qc, qs)
	if err != nil {
		return out, err
	}
	for _, e := range ents {
		ce := e.GetCounterEntry()
		i := ce.GetIndex().GetIndex()
		if ce.CounterId == idClass {
			if i >= 0 && i < NumClasses {
				out.Packets[i], out.Bytes[i] = uint64(ce.Data.GetPacketCount()), uint64(ce.Data.GetByteCount())
			}
		} else if i >= 0 && i < NumStats {
			out.Stats[i] = uint64(ce.Data.GetPacketCount())
		}
	}
	return out, nil
}
