// Package memtrace holds tracebed's memory-access traces: the page-level
// record of what an application touches, which the far-memory experiments
// replay on paging hosts (workloads/farmem).
//
// A trace is a sequence of Access records — compute for Gap, then touch Page,
// reading or writing it. Three encodings exist:
//
//   - binary (".memtrace"): compact, chunked, checksummed; what generators
//     and importers write and what replay reads (binary.go);
//   - text (".memtxt"): one access per line ("W 0x1f 250ns"), for small
//     hand-written examples and golden files (text.go);
//   - valgrind lackey output (".lackey"): a program recorded with
//     `valgrind --tool=lackey --trace-mem=yes` (lackey.go).
//
// Every decoder is a stream (a Source): memory stays bounded by a buffer
// whatever the trace's length (plus, for lackey, the page renumbering,
// which grows with the program's footprint). Convert turns any trace into
// the binary form; Cache does so once per trace content, so that runs
// replay large recordings from their binary form; Inspect summarises a
// trace (statistics, a reuse-distance histogram) and reports every bad
// line. Every decoder returns errors that name the file and the line or
// byte offset, and none of them panics on malformed input (each has a
// fuzz target).
package memtrace

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strings"
	"time"

	"github.com/tracebed/tracebed/internal/problems"
)

// DefaultPageSize is the page size traces use unless they say otherwise.
const DefaultPageSize = 4096

// MaxPage bounds page numbers: 2^52 pages of 4 KiB span a 64-bit address
// space, and the bound keeps the binary encoding's arithmetic exact.
const MaxPage = 1<<56 - 1

// Access is one page access of a trace: the application computes for Gap,
// then touches Page (a read, or a write when Write is set).
type Access struct {
	Page  uint64
	Gap   time.Duration
	Write bool
}

// Source yields the accesses of a trace in order.
//
// Read fills buf with the next accesses and returns how many it stored. At
// the end of the trace it returns 0, io.EOF. Any other error means the trace
// is malformed; its message names where.
type Source interface {
	Read(buf []Access) (int, error)
}

// Header describes a trace.
type Header struct {
	// PageSize is the page size in bytes, a power of two (4096 unless the
	// trace says otherwise).
	PageSize int
	// Pages is the number of distinct page numbers the trace may use,
	// [0, Pages), when known: a hint for sizing page tables. Zero means
	// unknown.
	Pages uint64
}

// Format names a trace encoding.
type Format string

// Trace encodings.
const (
	Binary Format = "binary"
	Text   Format = "text"
	Lackey Format = "lackey"
)

// Extensions maps file extensions to formats.
var Extensions = map[string]Format{".memtrace": Binary, ".memtxt": Text, ".lackey": Lackey}

// DetectFormat returns the format of a trace file from its extension or,
// failing that, from its first bytes.
func DetectFormat(name string, data []byte) (Format, error) {
	if f, ok := Extensions[strings.ToLower(filepath.Ext(name))]; ok {
		return f, nil
	}
	switch {
	case bytes.HasPrefix(data, []byte(binaryMagic)):
		return Binary, nil
	case bytes.HasPrefix(data, []byte("==")) || bytes.Contains(firstLine(data), []byte("Lackey")):
		return Lackey, nil
	case len(data) > 0:
		return Text, nil
	}
	return "", fmt.Errorf("%s: empty file is not a memory trace (want %s)", name, extensionList())
}

func firstLine(b []byte) []byte {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		return b[:i]
	}
	return b
}

func extensionList() string {
	return ".memtrace (binary), .memtxt (text) or .lackey (valgrind lackey output)"
}

// Open returns the header and a Source for the trace in data; name is used
// for the format (by extension) and in error messages. Lackey output is
// imported with DefaultLackeyOptions. It is OpenReader over data.
func Open(name string, data []byte) (Header, Source, error) {
	return OpenReader(name, bytes.NewReader(data))
}

// OpenReader returns the header and a streaming Source for the trace read
// from r, whose format is given by name's extension or, failing that, by
// its first bytes. Memory stays bounded by the decoder's buffer whatever
// the trace's length. For lackey output, whose pages hint is known only at
// the end, the header's Pages is 0.
func OpenReader(name string, r io.Reader) (Header, Source, error) {
	return openReader(name, r, DefaultLackeyOptions(), nil)
}

// OpenReaderWith is OpenReader with lackey import options.
func OpenReaderWith(name string, r io.Reader, lackey LackeyOptions) (Header, Source, error) {
	return openReader(name, r, lackey, nil)
}

// sniffLen is how many bytes format detection looks at.
const sniffLen = 512

func openReader(name string, r io.Reader, lackey LackeyOptions, p *problems.List) (Header, Source, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	head, err := br.Peek(sniffLen)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, bufio.ErrBufferFull) {
		return Header{}, nil, fmt.Errorf("%s: %w", name, err)
	}
	f, err := DetectFormat(name, head)
	if err != nil {
		return Header{}, nil, err
	}
	switch f {
	case Binary:
		rd, err := NewReader(name, br)
		if err != nil {
			return Header{}, nil, err
		}
		return rd.Header(), rd, nil
	case Text:
		t, err := newTextReader(name, br, p)
		if err != nil {
			return Header{}, nil, err
		}
		return t.Header(), t, nil
	case Lackey:
		l, err := newLackeyReader(name, br, lackey, p)
		if err != nil {
			return Header{}, nil, err
		}
		return l.Header(), l, nil
	}
	return Header{}, nil, fmt.Errorf("%s: unknown trace format %q", name, f)
}

// ReadAll drains src into a slice.
func ReadAll(src Source) ([]Access, error) {
	var out []Access
	_, _, err := Scan(src, math.MaxUint64, nil, func(acc []Access) error {
		out = append(out, acc...)
		return nil
	})
	return out, err
}

// Stats summarise a trace.
type Stats struct {
	Accesses uint64        `json:"accesses"`
	Writes   uint64        `json:"writes"`
	Pages    uint64        `json:"pages"`      // distinct pages touched
	MaxPage  uint64        `json:"max_page"`   // largest page number
	Compute  time.Duration `json:"compute_ns"` // sum of gaps
}

// Summarize reads src to the end and returns its statistics. Its memory
// grows with the distinct pages (a bit each, in blocks), not with the
// trace's length.
func Summarize(src Source) (Stats, error) {
	var c statsCounter
	_, _, err := Scan(src, math.MaxUint64, nil, func(acc []Access) error {
		c.add(acc)
		return nil
	})
	return c.stats(), err
}

// Scan reads src a block at a time and hands each block to fn, until src
// ends (done) or more than budget accesses were read. stop, if not nil, is
// called before each block; its error, or fn's, ends the scan and is
// returned. n is the accesses read.
func Scan(src Source, budget uint64, stop func() error, fn func([]Access) error) (n uint64, done bool, err error) {
	buf := make([]Access, 4096)
	for n <= budget {
		if stop != nil {
			if err := stop(); err != nil {
				return n, false, err
			}
		}
		k, err := src.Read(buf)
		n += uint64(k)
		if ferr := fn(buf[:k]); ferr != nil {
			return n, false, ferr
		}
		if errors.Is(err, io.EOF) {
			return n, true, nil
		}
		if err != nil {
			return n, false, err
		}
	}
	return n, false, nil
}

// statsCounter accumulates Stats access by access.
type statsCounter struct {
	st   Stats
	seen pageSet
}

func (c *statsCounter) add(acc []Access) {
	for _, a := range acc {
		c.st.Accesses++
		if a.Write {
			c.st.Writes++
		}
		c.st.Compute += a.Gap
		c.st.MaxPage = max(c.st.MaxPage, a.Page)
		c.seen.add(a.Page)
	}
}

func (c *statsCounter) stats() Stats {
	st := c.st
	st.Pages = c.seen.n
	return st
}

func (s Stats) String() string {
	return fmt.Sprintf("%d accesses (%d writes) to %d pages, %v of compute", s.Accesses, s.Writes, s.Pages, s.Compute)
}

// pageSet is a set of page numbers: a bitmap in blocks of 2^15 pages, so
// that dense and clustered page numbers cost a bit each and sparse ones a
// block per cluster.
type pageSet struct {
	blocks map[uint64]*[512]uint64
	last   *[512]uint64
	lastID uint64
	n      uint64
}

func (s *pageSet) add(p uint64) bool {
	id := p >> 15
	b := s.last
	if b == nil || id != s.lastID {
		if s.blocks == nil {
			s.blocks = map[uint64]*[512]uint64{}
		}
		b = s.blocks[id]
		if b == nil {
			b = new([512]uint64)
			s.blocks[id] = b
		}
		s.last, s.lastID = b, id
	}
	w, bit := (p>>6)&511, uint64(1)<<(p&63)
	if b[w]&bit != 0 {
		return false
	}
	b[w] |= bit
	s.n++
	return true
}

// SliceSource is a Source over accesses held in memory.
type SliceSource struct {
	acc []Access
	pos int
}

// NewSliceSource returns a Source that yields acc.
func NewSliceSource(acc []Access) *SliceSource { return &SliceSource{acc: acc} }

// Read implements Source.
func (s *SliceSource) Read(buf []Access) (int, error) {
	if s.pos >= len(s.acc) {
		return 0, io.EOF
	}
	n := copy(buf, s.acc[s.pos:])
	s.pos += n
	return n, nil
}

// Reset rewinds the source to the first access.
func (s *SliceSource) Reset() { s.pos = 0 }

func checkPageSize(ps int) error {
	if ps < 512 || ps > 1<<30 || ps&(ps-1) != 0 {
		return fmt.Errorf("page size %d: want a power of two from 512 to 1GiB", ps)
	}
	return nil
}
