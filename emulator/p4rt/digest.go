package p4rt

import (
	"encoding/binary"
	"time"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

// Digests (P4Runtime 1.4.1 §9.8): a program sends digest messages through
// a Digest; a controller enables each digest with a DigestEntry, whose
// configuration a DigestQueue applies (buffering, duplicate filtering,
// acknowledgements) on the server side.

// Digest is a program's handle on one digest of its P4Info.
type Digest struct {
	t    *Target
	id   uint32
	name string
	cfg  *p4v1.DigestEntry_Config // nil: not enabled
}

// Digest returns the handle of the named digest.
func (t *Target) Digest(name string) (*Digest, error) {
	for _, d := range t.digests {
		if d.name == name || aliasOf(d.name) == name {
			return d, nil
		}
	}
	return nil, errf(codes.NotFound, "p4info has no digest named %q", name)
}

func aliasOf(name string) string {
	for i := len(name) - 1; i >= 0; i-- {
		if name[i] == '.' {
			return name[i+1:]
		}
	}
	return name
}

// Send hands one digest message to the Target's sink, if a controller
// enabled the digest and a sink is set; it reports whether it did. It is
// called on the packet path and must not block: the sink only queues.
func (d *Digest) Send(data *p4v1.P4Data) bool {
	if d.cfg == nil || d.t.digestSink == nil {
		return false
	}
	d.t.digestSink(d.id, d.cfg, data)
	return true
}

// SetDigestSink sets where Send delivers digest messages (the server's
// DigestQueue); nil drops them.
func (t *Target) SetDigestSink(sink func(id uint32, cfg *p4v1.DigestEntry_Config, data *p4v1.P4Data)) {
	t.digestSink = sink
}

func (t *Target) writeDigest(typ p4v1.Update_Type, e *p4v1.DigestEntry) error {
	d := t.digests[e.GetDigestId()]
	if d == nil {
		return errf(codes.NotFound, "no digest with id %#x", e.GetDigestId())
	}
	if err := CheckExistence(typ, d.cfg != nil, "enabled digest "+d.name); err != nil {
		return err
	}
	if typ == p4v1.Update_DELETE {
		d.cfg = nil
		return nil
	}
	cfg := e.GetConfig()
	if cfg == nil {
		return errf(codes.InvalidArgument, "digest %s: a configuration is needed", d.name)
	}
	if cfg.GetMaxTimeoutNs() < 0 || cfg.GetMaxListSize() < 0 || cfg.GetAckTimeoutNs() < 0 {
		return errf(codes.InvalidArgument, "digest %s: negative configuration values", d.name)
	}
	d.cfg = proto.Clone(cfg).(*p4v1.DigestEntry_Config)
	return nil
}

func (t *Target) readDigests(q *p4v1.DigestEntry, yield func(*p4v1.Entity) error) error {
	if id := q.GetDigestId(); id != 0 && t.digests[id] == nil {
		return errf(codes.NotFound, "no digest with id %#x", id)
	}
	for _, id := range sortedIDs(t.digests) {
		d := t.digests[id]
		if d.cfg == nil || q.GetDigestId() != 0 && q.GetDigestId() != id {
			continue
		}
		e := &p4v1.DigestEntry{DigestId: id, Config: proto.Clone(d.cfg).(*p4v1.DigestEntry_Config)}
		if err := yield(&p4v1.Entity{Entity: &p4v1.Entity_DigestEntry{DigestEntry: e}}); err != nil {
			return err
		}
	}
	return nil
}

// DigestQueue turns digest messages into DigestList stream messages as
// §9.8 describes: per digest, messages are buffered until max_list_size
// distinct ones are waiting or max_timeout_ns has passed since the first;
// a message already waiting, or sent and not yet acknowledged (for up to
// ack_timeout_ns), is dropped as a duplicate. It is driven by the caller's
// clock and is not safe for concurrent use.
type DigestQueue struct {
	bufs  map[uint32]*digestBuf
	sent  map[[2]uint64]*sentList // (digest id, list id)
	known map[string]int          // data in a buffer or unacknowledged list → count
	next  uint64
}

type digestBuf struct {
	cfg   *p4v1.DigestEntry_Config
	first time.Time
	data  []*p4v1.P4Data
	keys  []string
}

type sentList struct {
	at   time.Time
	ack  time.Duration
	keys []string
}

// NewDigestQueue returns an empty queue.
func NewDigestQueue() *DigestQueue {
	return &DigestQueue{bufs: map[uint32]*digestBuf{}, sent: map[[2]uint64]*sentList{}, known: map[string]int{}}
}

// Add queues one message of digest id, configured by cfg, at time now; it
// returns the lists that are ready.
func (q *DigestQueue) Add(now time.Time, id uint32, cfg *p4v1.DigestEntry_Config, data *p4v1.P4Data) []*p4v1.DigestList {
	q.expire(now)
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(data)
	key := string(binary.BigEndian.AppendUint32(b, id))
	if q.known[key] > 0 {
		return nil
	}
	buf := q.bufs[id]
	if buf == nil {
		buf = &digestBuf{}
		q.bufs[id] = buf
	}
	if len(buf.data) == 0 {
		buf.first = now
	}
	buf.cfg = cfg
	buf.data = append(buf.data, proto.Clone(data).(*p4v1.P4Data))
	buf.keys = append(buf.keys, key)
	q.known[key]++
	if cfg.GetMaxTimeoutNs() == 0 || cfg.GetMaxListSize() > 0 && int32(len(buf.data)) >= cfg.GetMaxListSize() {
		return []*p4v1.DigestList{q.flush(now, id, buf)}
	}
	return nil
}

// Tick returns the lists whose max_timeout_ns has passed at now and
// forgets acknowledgements that timed out.
func (q *DigestQueue) Tick(now time.Time) []*p4v1.DigestList {
	q.expire(now)
	var out []*p4v1.DigestList
	for _, id := range sortedIDs(q.bufs) {
		buf := q.bufs[id]
		if len(buf.data) > 0 && now.Sub(buf.first) >= time.Duration(buf.cfg.GetMaxTimeoutNs()) {
			out = append(out, q.flush(now, id, buf))
		}
	}
	return out
}

// Next returns when Tick has work next (false: nothing is waiting).
func (q *DigestQueue) Next() (time.Time, bool) {
	var t time.Time
	ok := false
	consider := func(at time.Time) {
		if !ok || at.Before(t) {
			t, ok = at, true
		}
	}
	for _, buf := range q.bufs {
		if len(buf.data) > 0 {
			consider(buf.first.Add(time.Duration(buf.cfg.GetMaxTimeoutNs())))
		}
	}
	for _, s := range q.sent {
		consider(s.at.Add(s.ack))
	}
	return t, ok
}

// Ack forgets the list a DigestListAck names; it reports whether the list
// was waiting for one.
func (q *DigestQueue) Ack(id uint32, list uint64) bool {
	s := q.sent[[2]uint64{uint64(id), list}]
	if s == nil {
		return false
	}
	q.forget(id, list, s)
	return true
}

// Reset empties the acknowledgement cache (on a change of primary
// controller; §9.8 allows it). Buffered messages stay.
func (q *DigestQueue) Reset() {
	for k, s := range q.sent {
		q.forget(uint32(k[0]), k[1], s)
	}
}

func (q *DigestQueue) flush(now time.Time, id uint32, buf *digestBuf) *p4v1.DigestList {
	q.next++
	l := &p4v1.DigestList{DigestId: id, ListId: q.next, Data: buf.data, Timestamp: now.UnixNano()}
	ack := time.Duration(buf.cfg.GetAckTimeoutNs())
	if ack > 0 {
		q.sent[[2]uint64{uint64(id), q.next}] = &sentList{at: now, ack: ack, keys: buf.keys}
	} else {
		for _, k := range buf.keys {
			q.unknow(k)
		}
	}
	buf.data, buf.keys = nil, nil
	return l
}

func (q *DigestQueue) expire(now time.Time) {
	for k, s := range q.sent {
		if now.Sub(s.at) >= s.ack {
			q.forget(uint32(k[0]), k[1], s)
		}
	}
}

func (q *DigestQueue) forget(id uint32, list uint64, s *sentList) {
	delete(q.sent, [2]uint64{uint64(id), list})
	for _, k := range s.keys {
		q.unknow(k)
	}
}

func (q *DigestQueue) unknow(k string) {
	if q.known[k]--; q.known[k] <= 0 {
		delete(q.known, k)
	}
}
