package paging

import (
	"bytes"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/p4/farmem"
)

// TestPooledServersReusePages runs two servers one after the other on one
// PagePool: the second stores its pages in the first one's memory, reads
// back exactly what it was written, and finds none of the first one's pages
// (which are still in the memory it reuses).
func TestPooledServersReusePages(t *testing.T) {
	const pageSize, n = 4096, 100
	pool := &PagePool{}
	from := netip.MustParseAddrPort("10.0.0.2:7471")
	page := make([]byte, pageSize)
	// Random pages, each kept whole (pages the store keeps as edges are
	// TestServerKeepsEdges's).
	fill := func(c *content, p uint64) {
		r := rand.New(rand.NewPCG(uint64(c.host), p))
		for i := range page {
			page[i] = byte(r.Uint32())
		}
	}
	write := func(s *Server, c *content, p uint64) {
		fill(c, p)
		s.Recv(from, farmem.Header{Type: farmem.TypeWrite, ID: uint32(p), Page: p, Version: 1, Sum: checksum(page)}.Append(nil, page))
	}

	first, c1 := NewPooledServer(pageSize, pool), newContent(1, 1, pageSize)
	first.Start(&fakeEnv{rng: rand.New(rand.NewPCG(1, 2))})
	for p := range uint64(n) {
		write(first, c1, p)
	}
	first.Release()
	if _, _, _, ok := first.Lookup(from, 0); ok {
		t.Error("a released server still finds its pages")
	}
	if got, want := len(pool.slabs[slabPages*pageSize]), (n+slabPages-1)/slabPages; got != want {
		t.Fatalf("the pool holds %d slabs, want %d", got, want)
	}

	second, c2 := NewPooledServer(pageSize, pool), newContent(2, 1, pageSize)
	second.Start(&fakeEnv{rng: rand.New(rand.NewPCG(1, 2))})
	for p := range uint64(n / 2) {
		write(second, c2, p)
	}
	if got := len(pool.slabs[slabPages*pageSize]); got != 1 {
		t.Errorf("the second server took %d of 2 slabs, want 1", 2-got)
	}
	for p := range uint64(n) {
		_, sum, data, ok := second.Lookup(from, p)
		if p >= n/2 {
			if ok {
				t.Fatalf("page %d, never written to the second server, is found", p)
			}
			continue
		}
		fill(c2, p)
		if !ok || sum != checksum(page) || !bytes.Equal(data, page) {
			t.Fatalf("page %d: found %v, not the page written", p, ok)
		}
	}
	if st := second.Stats(); st.StoredPages != n/2 || st.Corrupt != 0 {
		t.Errorf("second server: %+v", st)
	}
}

// recordingEnv is a fakeEnv that keeps the last message sent.
type recordingEnv struct {
	fakeEnv
	last []byte
}

func (e *recordingEnv) Send(_ emulator.Addr, b []byte) {
	e.sent++
	e.last = append(e.last[:0], b...)
}

// TestServerKeepsEdges writes pages of every form to a server — a host's
// stamped versions (kept as their edges over the host's reference page),
// pages that differ from the reference in the middle (kept whole), and
// pages that change from one form to the other — and reads each back,
// through Recv and Lookup: every read returns the page last written, and a
// store of stamped pages takes a fraction of their size.
func TestServerKeepsEdges(t *testing.T) {
	const pageSize = 4096
	pool := &PagePool{}
	s := NewPooledServer(pageSize, pool)
	env := &recordingEnv{fakeEnv: fakeEnv{rng: rand.New(rand.NewPCG(1, 2))}}
	s.Start(env)
	from := netip.MustParseAddrPort("10.0.0.2:7471")
	c := newContent(1, 1, pageSize)
	written := map[uint64][]byte{}
	versions := map[uint64]uint32{}
	write := func(p uint64, page []byte) {
		versions[p]++
		s.Recv(from, farmem.Header{Type: farmem.TypeWrite, ID: 1, Page: p, Version: versions[p], Sum: checksum(page)}.Append(nil, page))
		written[p] = bytes.Clone(page)
	}
	stamped := func(p uint64) []byte {
		page := make([]byte, pageSize)
		c.fill(page, p, versions[p]+1)
		return page
	}
	odd := func(p uint64, at int) []byte { // a stamped page with a byte of its middle changed
		page := stamped(p)
		page[at] ^= 0x5a
		return page
	}
	check := func(when string) {
		t.Helper()
		for p, want := range written {
			s.Recv(from, farmem.Header{Type: farmem.TypeRead, ID: 2, Page: p}.Append(nil, nil))
			h, data, err := farmem.Parse(env.last)
			if err != nil || h.Type != farmem.TypeData || h.Version != versions[p] || h.Sum != checksum(want) || !bytes.Equal(data, want) {
				t.Fatalf("%s: page %d read back is not the page written (%v, %+v)", when, p, err, h)
			}
			v, sum, got, ok := s.Lookup(from, p)
			if !ok || v != versions[p] || sum != checksum(want) || !bytes.Equal(got, want) {
				t.Fatalf("%s: Lookup of page %d is not the page written", when, p)
			}
		}
	}
	for p := range uint64(200) {
		write(p, stamped(p))
	}
	check("stamped pages")
	if got := len(s.slabs); got != 1 {
		t.Errorf("200 stamped pages took %d slabs of %d pages, want 1", got, slabPages)
	}
	write(3, odd(3, edge))                   // first byte of the middle
	write(4, odd(4, pageSize-edge-1))        // last byte of the middle
	write(5, odd(5, pageSize/2))             // inside
	write(6, odd(6, 0))                      // an edge: still kept as edges
	write(300, odd(300, 1000))               // a new page, whole
	write(1<<40, stamped(1<<40))             // a sparse page
	write(1<<40+1, odd(1<<40+1, pageSize/3)) // and one kept whole
	check("pages that differ from the reference")
	for _, p := range []uint64{3, 4, 300} { // whole → edges
		write(p, stamped(p))
	}
	write(7, odd(7, 2000)) // edges → whole, reusing a freed page
	check("pages that changed form")
	// Writes whose data does not match their checksum, in an edge (the
	// checksum from the edges and the reference's share) and in the
	// middle (the page's): dropped, the stored versions kept.
	for _, at := range []int{5, pageSize - 1, pageSize / 2} {
		page := stamped(8)
		sum := checksum(page)
		page[at] ^= 1
		s.Recv(from, farmem.Header{Type: farmem.TypeWrite, ID: 3, Page: 8, Version: versions[8] + 1, Sum: sum}.Append(nil, page))
	}
	check("after corrupted writes")
	if st := s.Stats(); st.StoredPages != 203 || st.Corrupt != 3 || st.NotFound != 0 {
		t.Errorf("server: %+v, want 203 pages stored, 3 corrupt writes", st)
	}
}
