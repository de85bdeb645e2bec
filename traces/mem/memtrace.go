// Package memtrace holds tracebed's memory-access traces: the page-level
// record of what an application touches, which the far-memory experiments
// replay on paging hosts (workloads/farmem).
//
// A trace is a sequence of Access records — compute for Gap, then touch Page,
// reading or writing it. Three encodings exist:
//
//   - binary (".memtrace"): compact, chunked, checksummed; what generators
//     and importers write and what large traces should use (binary.go);
//   - text (".memtxt"): one access per line ("W 0x1f 250ns"), for small
//     hand-written examples and golden files (text.go);
//   - valgrind lackey output (".lackey"): imported on the fly, so that a
//     program recorded with `valgrind --tool=lackey --trace-mem=yes` can be
//     replayed directly (lackey.go).
//
// Open picks the decoder from a file's name or contents. Every decoder
// returns errors that name the file and the line or byte offset, and none of
// them panics on malformed input (each has a fuzz target).
package memtrace

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"
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
// imported with DefaultLackeyOptions.
func Open(name string, data []byte) (Header, Source, error) {
	f, err := DetectFormat(name, data)
	if err != nil {
		return Header{}, nil, err
	}
	switch f {
	case Binary:
		r, err := NewReader(name, bytes.NewReader(data))
		if err != nil {
			return Header{}, nil, err
		}
		return r.Header(), r, nil
	case Text:
		h, acc, err := ParseText(name, data)
		if err != nil {
			return Header{}, nil, err
		}
		return h, NewSliceSource(acc), nil
	case Lackey:
		h, acc, err := ImportLackey(name, bytes.NewReader(data), DefaultLackeyOptions())
		if err != nil {
			return Header{}, nil, err
		}
		return h, NewSliceSource(acc), nil
	}
	return Header{}, nil, fmt.Errorf("%s: unknown trace format %q", name, f)
}

// ReadAll drains src into a slice.
func ReadAll(src Source) ([]Access, error) {
	var out []Access
	buf := make([]Access, 4096)
	for {
		n, err := src.Read(buf)
		out = append(out, buf[:n]...)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
	}
}

// Stats summarise a trace.
type Stats struct {
	Accesses uint64
	Writes   uint64
	Pages    uint64        // distinct pages touched
	MaxPage  uint64        // largest page number
	Compute  time.Duration // sum of gaps
}

// Summarize reads src to the end and returns its statistics.
func Summarize(src Source) (Stats, error) {
	var st Stats
	seen := map[uint64]struct{}{}
	buf := make([]Access, 4096)
	for {
		n, err := src.Read(buf)
		for _, a := range buf[:n] {
			st.Accesses++
			if a.Write {
				st.Writes++
			}
			st.Compute += a.Gap
			st.MaxPage = max(st.MaxPage, a.Page)
			seen[a.Page] = struct{}{}
		}
		if errors.Is(err, io.EOF) {
			st.Pages = uint64(len(seen))
			return st, nil
		}
		if err != nil {
			return st, err
		}
	}
}

func (s Stats) String() string {
	return fmt.Sprintf("%d accesses (%d writes) to %d pages, %v of compute", s.Accesses, s.Writes, s.Pages, s.Compute)
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
