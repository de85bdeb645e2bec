package fwd

import (
	"context"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"

	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/topologies"
)

// RouteUpdates returns the P4Runtime updates that install switch sw's
// routes of top in fwd.p4's ingress.ipv4_route, by name (so they work on
// any program that includes fwd.p4's forwarding, compiled by p4c or a Go
// twin): one entry per destination host, its action a one-shot action set
// of forward(port) over the destination's equal-cost ports. The Go twin
// has these routes from the topology already (typ MODIFY rewrites them
// unchanged); bmv2 needs them written (typ INSERT).
func RouteUpdates(n *p4rt.Names, top *topologies.Topology, sw string, typ p4v1.Update_Type) ([]*p4v1.Update, error) {
	tid, err := n.TableID(TableRouteName)
	if err != nil {
		return nil, err
	}
	fid, err := n.MatchFieldID(TableRouteName, FieldDst)
	if err != nil {
		return nil, err
	}
	aid, err := n.ActionID(ActionFwdName)
	if err != nil {
		return nil, err
	}
	pid, err := n.ParamID(ActionFwdName, ParamPort)
	if err != nil {
		return nil, err
	}
	routes := top.Routes()[sw]
	var ups []*p4v1.Update
	for _, h := range top.Hosts() {
		ports := routes[h.IP]
		if len(ports) == 0 {
			continue
		}
		set := &p4v1.ActionProfileActionSet{}
		for _, port := range ports {
			set.ActionProfileActions = append(set.ActionProfileActions, &p4v1.ActionProfileAction{Weight: 1,
				Action: &p4v1.Action{ActionId: aid, Params: []*p4v1.Action_Param{{ParamId: pid, Value: p4rt.EncodeUint(uint64(port))}}}})
		}
		a := h.IP.As4()
		te := &p4v1.TableEntry{TableId: tid,
			Match: []*p4v1.FieldMatch{{FieldId: fid, FieldMatchType: &p4v1.FieldMatch_Exact_{Exact: &p4v1.FieldMatch_Exact{
				Value: p4rt.EncodeUint(uint64(a[0])<<24 | uint64(a[1])<<16 | uint64(a[2])<<8 | uint64(a[3]))}}}},
			Action: &p4v1.TableAction{Type: &p4v1.TableAction_ActionProfileActionSet{ActionProfileActionSet: set}}}
		ups = append(ups, &p4v1.Update{Type: typ, Entity: p4rt.Table(te)})
	}
	return ups, nil
}

// ReadCounters reads fwd.p4's forwarding counters (ingress.forwarded,
// ingress.drops by reason) from the switch behind c, by name: every frame
// the pipeline received is counted once in them.
func ReadCounters(ctx context.Context, c p4rt.Client) (Counters, error) {
	var out Counters
	n, err := p4rt.NewNames(c.P4Info())
	if err != nil {
		return out, err
	}
	qf, err := n.CounterQuery(CounterFwdName, -1)
	if err != nil {
		return out, err
	}
	qd, err := n.CounterQuery(CounterDropName, -1)
	if err != nil {
		return out, err
	}
	idFwd, _ := n.CounterID(CounterFwdName)
	ents, err := c.Read(ctx, qf, qd)
	if err != nil {
		return out, err
	}
	for _, e := range ents {
		ce := e.GetCounterEntry()
		i, pk := ce.GetIndex().GetIndex(), uint64(ce.GetData().GetPacketCount())
		switch {
		case ce.GetCounterId() == idFwd:
			out.Forwarded += pk
		case i >= 0 && i < NumDrops:
			out.Drops[i] = pk
		}
	}
	return out, nil
}

// Total is the number of frames the counters account for.
func (c Counters) Total() uint64 {
	n := c.Forwarded
	for _, d := range c.Drops {
		n += d
	}
	return n
}
