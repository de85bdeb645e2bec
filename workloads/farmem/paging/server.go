package paging

import (
	"bytes"
	"sync"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/frame"
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

// stored is a page held by the server: data is the whole page, or, for a
// page that differs from its host's reference page only in its first and
// last edge bytes, just those 2·edge bytes (len(data) tells which).
type stored struct {
	version uint32
	sum     uint32
	data    []byte
}

// edge is how many bytes at each end of a page the server keeps of a page
// whose middle is its host's reference middle (a cache line each).
const edge = 64

// Server is a memory server: it stores the pages hosts write back, one copy
// per (host, page), with the page's version and the CRC-32C of that
// version's data, and answers reads with them. It implements emulator.Agent.
//
// The store deduplicates: the first page a host writes becomes that host's
// reference page, and a page whose bytes between its first and last 64
// equal the reference's is kept as those 128 bytes, its middle sent from
// the reference; any other page is kept whole. Pages written by the paging
// hosts differ only in their stamps (content), so a store of every page of
// a working set is a few percent of its size and stays in the caches: a
// read no longer copies a page the server stored long before out of memory
// that missed them, nor a write into it, which was a fifth of a replay.
// Reads and writes answer exactly as from a store of whole pages.
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
	// Buffers of pages that changed representation, for the next page
	// that needs one: whole pages and edge pairs.
	freePages, freeEdges [][]byte
	out                  []byte
	scratch              []byte
	page                 []byte // a page Lookup assembled
	stats                ServerStats
}

// slabPages is how many page buffers the server allocates at once: a
// store fills page by page, and one allocation per page was a tenth of a
// replay's CPU time (the allocator and the collector).
const slabPages = 64

// alloc returns a buffer of n bytes (a page or an edge pair) for a page
// stored. Its bytes are undefined (a pooled slab holds an earlier server's
// pages): the caller overwrites all of it.
func (s *Server) alloc(n int) []byte {
	free := &s.freeEdges
	if n == s.pageSize {
		free = &s.freePages
	}
	if k := len(*free); k > 0 {
		b := (*free)[k-1]
		*free = (*free)[:k-1]
		return b
	}
	if len(s.slab) < n {
		s.slab = s.pool.get(slabPages * s.pageSize)
		if s.pool != nil {
			s.slabs = append(s.slabs, s.slab)
		}
	}
	p := s.slab[:n:n]
	s.slab = s.slab[n:]
	return p
}

// free keeps a buffer alloc returned for a page stored in another form.
func (s *Server) free(b []byte) {
	if len(b) == s.pageSize {
		s.freePages = append(s.freePages, b)
	} else {
		s.freeEdges = append(s.freeEdges, b)
	}
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
	ref    []byte     // the host's reference page: a copy of its first write
	refUDP uint16     // its middle's frame.Sum, for the UDP checksum of a read
	refCRC *middleCRC // its middle's CRC-32C, for the checksum of a write
}

// pageMiddle returns the bytes of a page that its edges leave: those its host's
// reference page shares with the pages kept as edges.
func pageMiddle(page []byte) []byte { return page[edge : len(page)-edge] }

// sameMiddle reports whether page, of a host whose store is hs (nil if it
// has none), can be kept as its edges: its middle is the reference's.
func sameMiddle(hs *hostStore, page []byte) bool {
	return hs != nil && hs.ref != nil && bytes.Equal(pageMiddle(page), pageMiddle(hs.ref))
}

// put stores data, a page of hs's host, in e: as its edges if edges (its
// middle is the reference's, sameMiddle), else whole. The host's first
// page becomes its reference.
func (s *Server) put(hs *hostStore, e *stored, data []byte, edges bool) {
	if hs.ref == nil && len(data) > 4*edge {
		hs.ref = s.alloc(len(data))
		copy(hs.ref, data)
		hs.refUDP = frame.Sum(pageMiddle(hs.ref))
		hs.refCRC = newMiddleCRC(pageMiddle(hs.ref))
		edges = true
	}
	n := len(data)
	if edges {
		n = 2 * edge
	}
	if len(e.data) != n {
		if e.data != nil {
			s.free(e.data)
		} else {
			s.stats.StoredPages++
		}
		e.data = s.alloc(n)
	}
	// Recv only borrows the payload (emulator.Agent): copy what is kept.
	if n == len(data) {
		copy(e.data, data)
		return
	}
	copy(e.data[:edge], data[:edge])
	copy(e.data[edge:], data[len(data)-edge:])
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
	s.slabs, s.slab, s.freePages, s.freeEdges, s.page = nil, nil, nil, nil, nil
	s.hosts, s.last, s.lastHS = map[emulator.Addr]*hostStore{}, emulator.Addr{}, nil
}

// Start implements emulator.Agent.
func (s *Server) Start(env emulator.Env) { s.env = env }

// Stats returns the server's counters.
func (s *Server) Stats() ServerStats { return s.stats }

// Lookup returns the stored version, checksum and data of a host's page.
// data belongs to the server: it is valid until the next Lookup or write.
func (s *Server) Lookup(host emulator.Addr, page uint64) (version, sum uint32, data []byte, ok bool) {
	hs := s.hosts[host]
	e := s.lookup(hs, page)
	if e == nil {
		return 0, 0, nil, false
	}
	data = e.data
	if len(data) != s.pageSize {
		s.page = append(append(append(s.page[:0], data[:edge]...), pageMiddle(hs.ref)...), data[edge:]...)
		data = s.page
	}
	return e.version, e.sum, data, true
}

// lookup returns the entry of a page stored in a host's store (nil if it
// has none), or nil.
func (s *Server) lookup(hs *hostStore, page uint64) *stored {
	if hs == nil {
		return nil
	}
	var e *stored
	if page < uint64(len(hs.dense)) {
		e = &hs.dense[page]
	} else {
		e = hs.sparse[page]
	}
	if e == nil || e.data == nil {
		return nil
	}
	return e
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
		hs := s.store(from)
		e := s.lookup(hs, h.Page)
		if e == nil {
			s.stats.NotFound++
			resp.Flags |= farmem.FlagNotFound
			s.out = resp.Append(s.out[:0], nil)
			s.env.Send(from, s.out)
			return
		}
		resp.Version, resp.Sum = e.version, e.sum
		// The page goes from the store into the frame with one copy.
		s.out = resp.Append(s.out[:0], nil)
		if len(e.data) == s.pageSize {
			emulator.SendParts(s.env, from, s.out, e.data, nil, &s.scratch)
			return
		}
		// The middle's share of the UDP checksum is computed once.
		s.out = append(s.out, e.data[:edge]...)
		emulator.SendPartsSum(s.env, from, s.out, pageMiddle(hs.ref), hs.refUDP, e.data[edge:], &s.scratch)
	case farmem.TypeWrite:
		s.stats.Writes++
		if len(data) != s.pageSize {
			s.stats.Corrupt++
			return // no ack: the host retransmits
		}
		// A page whose middle is the reference's has its checksum from
		// its edges and the reference's share.
		hs := s.store(from)
		edges := sameMiddle(hs, data)
		var sum uint32
		if edges {
			sum = hs.refCRC.checksum(data[:edge], data[len(data)-edge:])
		} else {
			sum = checksum(data)
		}
		if sum != h.Sum {
			s.stats.Corrupt++
			return
		}
		e := s.slot(from, h.Page)
		switch {
		case e.data == nil || h.Version > e.version:
			s.put(s.lastHS, e, data, edges) // data is a whole page: checked above
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
