package paging

import (
	"sync"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/p4/farmem"
)

// ServerStats are a memory server's counters.
type ServerStats struct {
	Reads, Writes uint64
	NotFound      uint64 // reads of pages never written
	StaleWrites   uint64 // writes of a version older than the stored one (late retransmissions)
	DupWrites     uint64 // writes of the stored version again (retransmissions)
	Corrupt       uint64 // writes whose data does not match their checksum (dropped)
	Conflicts     uint64 // writes of the stored version with other data
	Malformed     uint64
	StoredPages   uint64
}

// stored is a page held by the server.
type stored struct {
	version uint32
	sum     uint32
	data    []byte
}

// Server is a memory server: it stores the pages hosts write back, one copy
// per (host, page), with the page's version and the CRC-32C of that
// version's data, and answers reads with them. It implements emulator.Agent.
//
// A write is stored only if its data matches its checksum and its version is
// newer than the stored one; every write is acknowledged (a retransmission
// of a stored version, or a late one of an older version, gets its ack
// again), so the host's retransmissions are idempotent.
type Server struct {
	env      emulator.Env
	pageSize int
	hosts    map[emulator.Addr]*hostStore
	last     emulator.Addr // the host served last, and its store
	lastHS   *hostStore
	slab     []byte   // the rest of the last allocation of page buffers
	slabs    [][]byte // every allocation of page buffers, to Release to pool
	pool     *PagePool
	out      []byte
	scratch  []byte
	stats    ServerStats
}

// slabPages is how many page buffers the server allocates at once: a
// store fills page by page, and one allocation per page was a tenth of a
// replay's CPU time (the allocator and the collector).
const slabPages = 64

// newPage returns a buffer for a page stored for the first time. Its
// bytes are undefined (a pooled slab holds an earlier server's pages): the
// caller overwrites the whole page.
func (s *Server) newPage() []byte {
	if len(s.slab) < s.pageSize {
		s.slab = s.pool.get(slabPages * s.pageSize)
		if s.pool != nil {
			s.slabs = append(s.slabs, s.slab)
		}
	}
	p := s.slab[:s.pageSize:s.pageSize]
	s.slab = s.slab[s.pageSize:]
	return p
}

// PagePool keeps the page memory of memory servers that are done for the
// servers that come after them, as a far-memory server registers its
// memory once rather than for each client's run. A server's store grows to
// the pages written to it, and memory new to a store costs more than the
// copy that fills it: the Go heap zeroes memory it reuses, and memory new
// to the process costs a page fault per 4 KiB on first touch (13–18 µs of
// CPU each on a virtual machine with shadow paging, where a replay of the
// store's size spent a third of its time in them). Servers of one pool may
// run concurrently. The zero value is an empty pool; a nil *PagePool
// allocates every time.
type PagePool struct {
	mu    sync.Mutex
	slabs map[int][][]byte // by size in bytes
}

// get returns a slab of n bytes, reused if the pool has one.
func (p *PagePool) get(n int) []byte {
	if p != nil {
		p.mu.Lock()
		defer p.mu.Unlock()
		if k := len(p.slabs[n]); k > 0 {
			b := p.slabs[n][k-1]
			p.slabs[n][k-1] = nil
			p.slabs[n] = p.slabs[n][:k-1]
			return b
		}
	}
	return make([]byte, n)
}

// put takes back slabs of n bytes.
func (p *PagePool) put(n int, slabs [][]byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.slabs == nil {
		p.slabs = map[int][][]byte{}
	}
	p.slabs[n] = append(p.slabs[n], slabs...)
}

// denseLimit bounds the dense part of a host's page table; pages above it
// (sparse address spaces, or garbage) go to a map, so that no page number
// makes the server allocate more than the pages it stores.
const denseLimit = 1 << 22

// hostStore holds one host's pages.
type hostStore struct {
	dense  []stored
	sparse map[uint64]*stored
}

// NewServer returns a memory server for pages of pageSize bytes.
func NewServer(pageSize int) *Server { return NewPooledServer(pageSize, nil) }

// NewPooledServer returns a memory server for pages of pageSize bytes that
// takes its page memory from pool and gives it back on Release.
func NewPooledServer(pageSize int, pool *PagePool) *Server {
	return &Server{pageSize: pageSize, hosts: map[emulator.Addr]*hostStore{}, pool: pool}
}

// Release empties the server's store and gives its page memory back to its
// pool, if it has one: call it when the server has stopped and no data
// Lookup returned is used any more.
func (s *Server) Release() {
	if s.pool != nil {
		s.pool.put(slabPages*s.pageSize, s.slabs)
	}
	s.slabs, s.slab = nil, nil
	s.hosts, s.last, s.lastHS = map[emulator.Addr]*hostStore{}, emulator.Addr{}, nil
}

// Start implements emulator.Agent.
func (s *Server) Start(env emulator.Env) { s.env = env }

// Stats returns the server's counters.
func (s *Server) Stats() ServerStats { return s.stats }

// Lookup returns the stored version, checksum and data of a host's page.
// data is the server's copy: it changes with the next write of the page.
func (s *Server) Lookup(host emulator.Addr, page uint64) (version, sum uint32, data []byte, ok bool) {
	return s.lookup(s.hosts[host], page)
}

// lookup is Lookup in a host's store (nil if it has none).
func (s *Server) lookup(hs *hostStore, page uint64) (version, sum uint32, data []byte, ok bool) {
	if hs == nil {
		return 0, 0, nil, false
	}
	var e *stored
	if page < uint64(len(hs.dense)) {
		e = &hs.dense[page]
	} else {
		e = hs.sparse[page]
	}
	if e == nil || e.data == nil {
		return 0, 0, nil, false
	}
	return e.version, e.sum, e.data, true
}

// store returns host's store, or nil, remembering the last one: a server
// mostly serves one host after another (Recv only: Lookup may run
// elsewhere).
func (s *Server) store(host emulator.Addr) *hostStore {
	if s.lastHS == nil || s.last != host {
		s.last, s.lastHS = host, s.hosts[host]
	}
	return s.lastHS
}

// slot returns the storage slot of (host, page), growing the host's table.
func (s *Server) slot(host emulator.Addr, page uint64) *stored {
	hs := s.store(host)
	if hs == nil {
		hs = &hostStore{sparse: map[uint64]*stored{}}
		s.hosts[host] = hs
		s.last, s.lastHS = host, hs
	}
	if page >= denseLimit {
		e := hs.sparse[page]
		if e == nil {
			e = &stored{}
			hs.sparse[page] = e
		}
		return e
	}
	if page >= uint64(len(hs.dense)) {
		n := min(max(int(page)+1, 2*len(hs.dense), 64), denseLimit)
		grown := make([]stored, n)
		copy(grown, hs.dense)
		hs.dense = grown
	}
	return &hs.dense[page]
}

// Recv implements emulator.Agent.
func (s *Server) Recv(from emulator.Addr, payload []byte) {
	h, data, err := farmem.Parse(payload)
	if err != nil {
		s.stats.Malformed++
		return
	}
	switch h.Type {
	case farmem.TypeRead:
		s.stats.Reads++
		resp := farmem.Header{Type: farmem.TypeData, ID: h.ID, Page: h.Page}
		version, sum, stored, ok := s.lookup(s.store(from), h.Page)
		if !ok {
			s.stats.NotFound++
			resp.Flags |= farmem.FlagNotFound
		} else {
			resp.Version, resp.Sum = version, sum
		}
		// The page goes from the store into the frame with one copy.
		s.out = resp.Append(s.out[:0], nil)
		emulator.SendParts(s.env, from, s.out, stored, nil, &s.scratch)
	case farmem.TypeWrite:
		s.stats.Writes++
		if len(data) != s.pageSize || checksum(data) != h.Sum {
			s.stats.Corrupt++
			return // no ack: the host retransmits
		}
		e := s.slot(from, h.Page)
		switch {
		case e.data == nil || h.Version > e.version:
			if e.data == nil {
				s.stats.StoredPages++
				e.data = s.newPage()
			}
			// Recv only borrows the payload (emulator.Agent): copy it into
			// the page's buffer (data is a whole page: checked above).
			copy(e.data, data)
			e.version, e.sum = h.Version, h.Sum
		case h.Version == e.version:
			s.stats.DupWrites++
			if h.Sum != e.sum {
				s.stats.Conflicts++
			}
		default:
			s.stats.StaleWrites++
		}
		ack := farmem.Header{Type: farmem.TypeAck, Urgency: h.Urgency, ID: h.ID, Page: h.Page, Version: h.Version}
		s.out = ack.Append(s.out[:0], nil)
		s.env.Send(from, s.out)
	default:
		s.stats.Malformed++
	}
}
