package p4rt

import (
	"bytes"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

// The packet replication engine's multicast groups (P4Runtime 1.4.1
// §9.5.1). Clone sessions are not supported.

// GroupChange is one change of a multicast group, given to the program's
// binding: the group's replicas after (nil for DELETE) and before (nil for
// INSERT) the change.
type GroupChange struct {
	Type          p4v1.Update_Type
	ID            uint32
	Replicas, Old []Replica
}

type mcGroup struct {
	msg  *p4v1.MulticastGroupEntry // as written, ports canonical
	reps []Replica
}

// MulticastGroups binds the packet replication engine's multicast groups:
// apply is called for every change after the Target has checked it (id
// not 0, replicas with a port, no (port, instance) pair twice); an error
// rejects the update. Without a binding, writes are UNIMPLEMENTED.
func (t *Target) MulticastGroups(apply func(*GroupChange) error) { t.pre = apply }

func (t *Target) writePRE(typ p4v1.Update_Type, e *p4v1.PacketReplicationEngineEntry) error {
	g := e.GetMulticastGroupEntry()
	if g == nil {
		if e.GetCloneSessionEntry() != nil {
			return errf(codes.Unimplemented, "clone sessions are not supported")
		}
		return errf(codes.InvalidArgument, "packet replication engine entry without a multicast group or clone session")
	}
	if t.pre == nil {
		return errf(codes.Unimplemented, "this program does not use multicast groups")
	}
	id := g.GetMulticastGroupId()
	if id == 0 {
		return errf(codes.InvalidArgument, "multicast group id 0 is not valid in a write")
	}
	old := t.groups[id]
	if err := CheckExistence(typ, old != nil, "multicast group "+itoa(id)); err != nil {
		return err
	}
	c := &GroupChange{Type: typ, ID: id}
	if old != nil {
		c.Old = old.reps
	}
	if typ == p4v1.Update_DELETE {
		if err := t.pre(c); err != nil {
			return err
		}
		delete(t.groups, id)
		return nil
	}
	ng := &mcGroup{msg: &p4v1.MulticastGroupEntry{MulticastGroupId: id, Metadata: bytes.Clone(g.GetMetadata())}}
	seen := map[Replica]bool{}
	for _, r := range g.GetReplicas() {
		port, err := ReplicaPort(r)
		if err != nil {
			return prefix(err, "multicast group %d", id)
		}
		rep := Replica{Port: port, Instance: r.GetInstance()}
		if seen[rep] {
			return errf(codes.InvalidArgument, "multicast group %d: replica (port %d, instance %d) given twice", id, port, r.GetInstance())
		}
		seen[rep] = true
		ng.reps = append(ng.reps, rep)
		// Read back in the encoding written (read-write symmetry): the
		// port kind is a oneof, and a client of before v1.4 knows only
		// egress_port.
		w := proto.Clone(r).(*p4v1.Replica)
		if _, ok := w.GetPortKind().(*p4v1.Replica_Port); ok {
			w.PortKind = &p4v1.Replica_Port{Port: EncodeUint(uint64(port))}
		}
		ng.msg.Replicas = append(ng.msg.Replicas, w)
	}
	c.Replicas = ng.reps
	if err := t.pre(c); err != nil {
		return err
	}
	t.groups[id] = ng
	return nil
}

func (t *Target) readPRE(q *p4v1.PacketReplicationEngineEntry, yield func(*p4v1.Entity) error) error {
	g := q.GetMulticastGroupEntry()
	if g == nil {
		if q.GetCloneSessionEntry() != nil {
			return nil // no clone sessions
		}
		return errf(codes.InvalidArgument, "packet replication engine query without a multicast group or clone session")
	}
	for _, id := range sortedIDs(t.groups) {
		if g.GetMulticastGroupId() != 0 && g.GetMulticastGroupId() != id {
			continue
		}
		m := proto.Clone(t.groups[id].msg).(*p4v1.MulticastGroupEntry)
		if err := yield(&p4v1.Entity{Entity: &p4v1.Entity_PacketReplicationEngineEntry{
			PacketReplicationEngineEntry: &p4v1.PacketReplicationEngineEntry{
				Type: &p4v1.PacketReplicationEngineEntry_MulticastGroupEntry{MulticastGroupEntry: m}}}}); err != nil {
			return err
		}
	}
	return nil
}
