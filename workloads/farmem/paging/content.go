package paging

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"math/bits"
	"math/rand/v2"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// checksum is CRC-32C, the checksum far-memory messages carry.
func checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// Stamps are the bytes of a page version that name it: stampHead bytes at
// the start, stampTail at the end; the body between them is the host's.
const (
	stampHead = 16
	stampTail = 8
)

// content generates the bytes of a page version: a per-host pseudo-random
// body stamped with (host, page, version) in its first 16 bytes and its last
// 8, so that every version of every page differs and a page returned for the
// wrong page, version or host fails its checksum. The model never keeps page
// contents on the host, nor builds them: a write-back goes out as its head
// stamp, the host's body and its tail stamp (three parts of one datagram),
// its CRC-32C comes from the stamps and the body's precomputed part (sum),
// and a fetched page is checked by comparing it with those parts (matches).
type content struct {
	host uint32
	body []byte // a whole page; body[stampHead:len(body)-stampTail] is every version's middle

	// The middle's part of CRC-32C, so that a version's checksum costs
	// 24 bytes of CRC instead of a page: the CRC register after the
	// middle is shift(register before it) ^ midSum, shift being the
	// linear map "run the register over len(middle) zero bytes", kept as
	// four tables of the images of each byte of the register.
	midSum uint32
	shift  [4][256]uint32
}

func newContent(host uint32, seed uint64, pageSize int) *content {
	r := rand.New(rand.NewPCG(seed, uint64(host)<<32|0x636f6e74))
	body := make([]byte, pageSize)
	for i := 0; i+8 <= len(body); i += 8 {
		binary.LittleEndian.PutUint64(body[i:], r.Uint64())
	}
	c := &content{host: host, body: body}
	mid := c.middle()
	c.midSum = crcRegister(0, mid)
	// The image of each bit of the register, then of each byte value at
	// each byte position (the map is linear: XOR the images of its bits).
	zeros := make([]byte, len(mid))
	var bit [32]uint32
	for i := range bit {
		bit[i] = crcRegister(1<<i, zeros)
	}
	for j := range c.shift {
		for v := 1; v < 256; v++ {
			low := bits.TrailingZeros(uint(v)) // v = 1<<low + the rest
			c.shift[j][v] = c.shift[j][v&^(1<<low)] ^ bit[8*j+low]
		}
	}
	return c
}

// crcRegister runs CRC-32C's register (no pre- or post-inversion) from
// state reg over b. hash/crc32 inverts around its register: Update(crc, b)
// is ^register(^crc, b).
func crcRegister(reg uint32, b []byte) uint32 {
	return ^crc32.Update(^reg, castagnoli, b)
}

// middle returns the bytes every version of every page shares.
func (c *content) middle() []byte { return c.body[stampHead : len(c.body)-stampTail] }

// stamps returns version v of page p's head and tail stamps.
func (c *content) stamps(p uint64, v uint32) (head [stampHead]byte, tail [stampTail]byte) {
	binary.LittleEndian.PutUint32(head[0:], c.host)
	binary.LittleEndian.PutUint32(head[4:], v)
	binary.LittleEndian.PutUint64(head[8:], p)
	binary.LittleEndian.PutUint64(tail[:], p^uint64(v)<<32^uint64(c.host))
	return head, tail
}

// fill writes version v of page p into dst (len(dst) == page size).
func (c *content) fill(dst []byte, p uint64, v uint32) {
	head, tail := c.stamps(p, v)
	copy(dst, head[:])
	copy(dst[stampHead:], c.middle())
	copy(dst[len(dst)-stampTail:], tail[:])
}

// sum returns the CRC-32C of version v of page p, checksum(fill(p, v)),
// without generating the page.
func (c *content) sum(p uint64, v uint32) uint32 {
	head, tail := c.stamps(p, v)
	reg := shortRegister(^uint32(0), head[:]) // CRC-32C starts its register at all ones
	reg = c.shift[0][reg&0xff] ^ c.shift[1][reg>>8&0xff] ^ c.shift[2][reg>>16&0xff] ^ c.shift[3][reg>>24] ^ c.midSum
	return ^shortRegister(reg, tail[:])
}

// shortRegister is crcRegister for a few bytes, a byte at a time:
// hash/crc32 would make b escape (a stamp would be an allocation).
func shortRegister(reg uint32, b []byte) uint32 {
	for _, x := range b {
		reg = castagnoli[byte(reg)^x] ^ reg>>8
	}
	return reg
}

// matches reports whether data is version v of page p, byte for byte.
func (c *content) matches(data []byte, p uint64, v uint32) bool {
	if len(data) != len(c.body) {
		return false
	}
	head, tail := c.stamps(p, v)
	n := len(data)
	return bytes.Equal(data[:stampHead], head[:]) && bytes.Equal(data[n-stampTail:], tail[:]) &&
		bytes.Equal(data[stampHead:n-stampTail], c.middle())
}
