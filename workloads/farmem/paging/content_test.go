package paging

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/tracebed/tracebed/p4/farmem"
)

// TestContentSum checks the checksum a host computes from a version's
// stamps against the CRC-32C of the version's bytes, and matches against
// byte comparison, for every page size and pages and versions at random.
func TestContentSum(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for size := farmem.MinPageSize; size <= farmem.MaxPageSize; size *= 2 {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			c := newContent(r.Uint32(), r.Uint64(), size)
			page := make([]byte, size)
			for range 200 {
				p, v := r.Uint64N(1<<26), r.Uint32()
				if r.IntN(4) == 0 {
					p, v = r.Uint64N(4), r.Uint32N(4) // small numbers: stamps mostly zero
				}
				c.fill(page, p, v)
				if got, want := c.sum(p, v), checksum(page); got != want {
					t.Fatalf("page %d version %d: sum %08x, CRC-32C of its bytes %08x", p, v, got, want)
				}
				if !c.matches(page, p, v) {
					t.Fatalf("page %d version %d does not match itself", p, v)
				}
				if c.matches(page, p, v+1) || c.matches(page, p+1, v) || c.matches(page[:size-1], p, v) {
					t.Fatalf("page %d version %d matches another version, page or size", p, v)
				}
				i := r.IntN(size)
				page[i] ^= 1 << r.IntN(8)
				if c.matches(page, p, v) {
					t.Fatalf("page %d version %d matches with byte %d flipped", p, v, i)
				}
			}
		})
	}
}
