package paging

import (
	"encoding/binary"
	"hash/crc32"
	"math/rand/v2"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// checksum is CRC-32C, the checksum far-memory messages carry.
func checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// content generates the bytes of a page version: a per-host pseudo-random
// body stamped with (host, page, version) in its first 16 bytes and its last
// 8, so that every version of every page differs and a page returned for the
// wrong page, version or host fails its checksum. Generating is a copy and
// two stores: the model never keeps page contents on the host.
type content struct {
	host uint32
	body []byte
}

func newContent(host uint32, seed uint64, pageSize int) *content {
	r := rand.New(rand.NewPCG(seed, uint64(host)<<32|0x636f6e74))
	body := make([]byte, pageSize)
	for i := 0; i+8 <= len(body); i += 8 {
		binary.LittleEndian.PutUint64(body[i:], r.Uint64())
	}
	return &content{host: host, body: body}
}

// fill writes version v of page p into dst (len(dst) == page size).
func (c *content) fill(dst []byte, p uint64, v uint32) {
	copy(dst, c.body)
	binary.LittleEndian.PutUint32(dst[0:], c.host)
	binary.LittleEndian.PutUint32(dst[4:], v)
	binary.LittleEndian.PutUint64(dst[8:], p)
	binary.LittleEndian.PutUint64(dst[len(dst)-8:], p^uint64(v)<<32^uint64(c.host))
}
