package memtrace

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/tracebed/tracebed/internal/problems"
)

// The text format (".memtxt") holds one access per line:
//
//	# a comment; blank lines are ignored
//	page_size 4096        optional, before the first access (default 4096)
//	pages 16              optional hint, before the first access: page numbers lie in [0, 16)
//	W 0                   write page 0, no compute before it
//	R 0x1f 250ns          compute 250ns, then read page 0x1f
//	r 7 1.5us             the operation letter is case-insensitive
//
// Numbers (page numbers, the pages hint) are written in decimal ("31",
// without leading zeros) or in hexadecimal after 0x or 0X ("0x1f"); nothing
// else is a number: no sign, no digit separators ("1_000"), no 0b or 0o
// prefixes, no leading zeros (which other tools read as octal). The page
// size is a decimal number of bytes. Gaps are Go durations ("250ns",
// "1.5us", "2ms") or "0", from 0 to one hour.

// ParseText parses a whole text trace held in memory; name appears in error
// messages. Large traces should be streamed with NewTextReader.
func ParseText(name string, data []byte) (Header, []Access, error) {
	r, err := NewTextReader(name, bytes.NewReader(data))
	if err != nil {
		return Header{}, nil, err
	}
	acc, err := ReadAll(r)
	if err != nil {
		return r.Header(), nil, err
	}
	return r.Header(), acc, nil
}

// TextReader decodes a text trace as a stream. It implements Source; its
// memory is one line buffer whatever the trace's length.
type TextReader struct {
	lr       *lineReader
	h        Header
	first    Access // the first access, read ahead to finish the header
	hasFirst bool
	started  bool // an access has been seen
	err      error
	problems *problems.List // nil: stop at the first bad line
	f        [4][]byte
}

// NewTextReader reads the directives at the head of a text trace (up to its
// first access) and returns a reader for its accesses.
func NewTextReader(name string, r io.Reader) (*TextReader, error) {
	return newTextReader(name, r, nil)
}

func newTextReader(name string, r io.Reader, p *problems.List) (*TextReader, error) {
	t := &TextReader{lr: newLineReader(name, r), h: Header{PageSize: DefaultPageSize}, problems: p}
	for !t.hasFirst {
		a, ok, err := t.nextAccess()
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		t.first, t.hasFirst = a, true
	}
	return t, nil
}

// Header returns the trace's header (page size and pages hint).
func (t *TextReader) Header() Header { return t.h }

// Read implements Source.
func (t *TextReader) Read(buf []Access) (int, error) {
	if t.err != nil {
		return 0, t.err
	}
	k := 0
	if t.hasFirst && len(buf) > 0 {
		buf[0], t.hasFirst = t.first, false
		k = 1
	}
	for k < len(buf) {
		a, ok, err := t.nextAccess()
		if err != nil {
			t.err = err
			return k, err
		}
		if !ok {
			if k == 0 {
				t.err = io.EOF
				return 0, io.EOF
			}
			break
		}
		buf[k] = a
		k++
	}
	return k, nil
}

// nextAccess returns the next access, handling directives, comments and,
// when collecting problems, bad lines on the way.
func (t *TextReader) nextAccess() (Access, bool, error) {
	for {
		b, ok := t.lr.next()
		if !ok {
			return Access{}, false, t.lr.failed()
		}
		a, isAccess, err := t.parseLine(b)
		if err != nil {
			err = fmt.Errorf("%s:%d: %w", t.lr.name, t.lr.line, err)
			if t.problems == nil || !t.problems.Add(err) {
				return Access{}, false, err
			}
			continue
		}
		if isAccess {
			t.started = true
			return a, true, nil
		}
	}
}

// parseLine reads one line: an access, a directive (applied to the header)
// or nothing (blank, comment).
func (t *TextReader) parseLine(b []byte) (Access, bool, error) {
	if i := bytes.IndexByte(b, '#'); i >= 0 {
		b = b[:i]
	}
	n := fields(b, t.f[:])
	if n == 0 {
		return Access{}, false, nil
	}
	f := t.f[:min(n, len(t.f))]
	switch op := f[0]; {
	case len(op) == 1 && (op[0]|0x20 == 'r' || op[0]|0x20 == 'w'):
		if n < 2 || n > 3 {
			return Access{}, false, errors.New("want \"R|W PAGE [GAP]\", e.g. \"W 0x1f 250ns\"")
		}
		page, err := parseNumber(f[1], MaxPage)
		if err != nil {
			return Access{}, false, fmt.Errorf("page %q: %v", truncate(f[1], 24), err)
		}
		if t.h.Pages != 0 && page >= t.h.Pages {
			return Access{}, false, fmt.Errorf("page %d is beyond the declared pages %d (pages directive)", page, t.h.Pages)
		}
		var gap time.Duration
		if n == 3 {
			if gap, err = parseGap(f[2]); err != nil {
				return Access{}, false, err
			}
		}
		return Access{Page: page, Gap: gap, Write: op[0]|0x20 == 'w'}, true, nil
	case bytes.EqualFold(op, []byte("page_size")):
		if t.started {
			return Access{}, false, errors.New("page_size must come before the first access")
		}
		if n != 2 {
			return Access{}, false, errors.New("want \"page_size BYTES\"")
		}
		ps, err := parseNumber(f[1], 1<<30)
		if err != nil || bytes.HasPrefix(f[1], []byte("0x")) || bytes.HasPrefix(f[1], []byte("0X")) {
			return Access{}, false, fmt.Errorf("page_size %q: want a decimal number of bytes, a power of two from 512 to 1073741824", truncate(f[1], 24))
		}
		if err := checkPageSize(int(ps)); err != nil {
			return Access{}, false, err
		}
		t.h.PageSize = int(ps)
	case bytes.EqualFold(op, []byte("pages")):
		if t.started {
			return Access{}, false, errors.New("pages must come before the first access")
		}
		if n != 2 {
			return Access{}, false, errors.New("want \"pages N\"")
		}
		v, err := parseNumber(f[1], MaxPage+1)
		if err != nil {
			return Access{}, false, fmt.Errorf("pages %q: %v", truncate(f[1], 24), err)
		}
		t.h.Pages = v
	default:
		return Access{}, false, fmt.Errorf("%q: want R or W (an access), page_size or pages", truncate(op, 24))
	}
	return Access{}, false, nil
}

// parseNumber reads a number of the text format: decimal without leading
// zeros, or hexadecimal after 0x or 0X; at most limit.
func parseNumber(b []byte, limit uint64) (uint64, error) {
	bad := fmt.Errorf("want a number up to %d, in decimal (31) or hexadecimal (0x1f)", limit)
	if len(b) == 0 || len(b) > 20 {
		return 0, bad
	}
	var v uint64
	if len(b) > 2 && b[0] == '0' && (b[1] == 'x' || b[1] == 'X') {
		if len(b) > 2+16 {
			return 0, bad
		}
		for _, c := range b[2:] {
			d, ok := hexDigit(c)
			if !ok {
				return 0, bad
			}
			v = v<<4 | uint64(d)
		}
	} else {
		for _, c := range b {
			if c < '0' || c > '9' {
				return 0, bad
			}
			if v > (1<<64-1-9)/10 {
				return 0, bad
			}
			v = v*10 + uint64(c-'0')
		}
	}
	if len(b) > 1 && b[0] == '0' && b[1] != 'x' && b[1] != 'X' {
		return 0, fmt.Errorf("leading zero (other tools read it as octal): write %d in decimal without it, or %#x in hexadecimal", v, v)
	}
	if v > limit {
		return 0, bad
	}
	return v, nil
}

// hexValue maps a byte to its value as a hexadecimal digit, or 0xff.
var hexValue = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = byte(c - '0')
	}
	for c := 'a'; c <= 'f'; c++ {
		t[c] = byte(c - 'a' + 10)
		t[c-'a'+'A'] = byte(c - 'a' + 10)
	}
	return t
}()

func hexDigit(c byte) (byte, bool) {
	v := hexValue[c]
	return v, v != 0xff
}

// parseGap reads a gap: "0" or a Go duration from 0 to MaxGap.
func parseGap(b []byte) (time.Duration, error) {
	if len(b) == 1 && b[0] == '0' {
		return 0, nil
	}
	gap, err := time.ParseDuration(string(b))
	if err != nil {
		return 0, fmt.Errorf("gap %q: want a duration such as 250ns or 1.5us", truncate(b, 24))
	}
	if gap < 0 || gap > MaxGap {
		return 0, fmt.Errorf("gap %v: want 0 to %v", gap, MaxGap)
	}
	return gap, nil
}

// WriteText writes accesses in the text format.
func WriteText(w io.Writer, h Header, acc []Access) error {
	tw := NewTextWriter(w, h)
	if err := tw.Write(acc...); err != nil {
		return err
	}
	return tw.Close()
}

// TextWriter writes a text trace access by access.
type TextWriter struct {
	w   *bufio.Writer
	err error
	b   []byte
}

// NewTextWriter writes h's directives and returns a writer for the accesses.
func NewTextWriter(w io.Writer, h Header) *TextWriter {
	tw := &TextWriter{w: bufio.NewWriterSize(w, 64<<10)}
	if h.PageSize != 0 && h.PageSize != DefaultPageSize {
		_, tw.err = fmt.Fprintf(tw.w, "page_size %d\n", h.PageSize)
	}
	if h.Pages != 0 && tw.err == nil {
		_, tw.err = fmt.Fprintf(tw.w, "pages %d\n", h.Pages)
	}
	return tw
}

// Write appends accesses.
func (tw *TextWriter) Write(acc ...Access) error {
	for _, a := range acc {
		if tw.err != nil {
			return tw.err
		}
		op := byte('R')
		if a.Write {
			op = 'W'
		}
		tw.b = append(tw.b[:0], op, ' ')
		tw.b = strconv.AppendUint(tw.b, a.Page, 10)
		if a.Gap != 0 {
			tw.b = append(tw.b, ' ')
			tw.b = append(tw.b, a.Gap.String()...)
		}
		tw.b = append(tw.b, '\n')
		_, tw.err = tw.w.Write(tw.b)
	}
	return tw.err
}

// Close flushes the trace; it does not close the underlying writer.
func (tw *TextWriter) Close() error {
	if tw.err != nil {
		return tw.err
	}
	return tw.w.Flush()
}
