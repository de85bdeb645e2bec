package paging

import (
	"bytes"
	"math/rand/v2"
	"net/netip"
	"testing"

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
	write := func(s *Server, c *content, p uint64) {
		c.fill(page, p, 1)
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
		c2.fill(page, p, 1)
		if !ok || sum != checksum(page) || !bytes.Equal(data, page) {
			t.Fatalf("page %d: found %v, not the page written", p, ok)
		}
	}
	if st := second.Stats(); st.StoredPages != n/2 || st.Corrupt != 0 {
		t.Errorf("second server: %+v", st)
	}
}
