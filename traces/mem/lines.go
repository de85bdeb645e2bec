package memtrace

import (
	"bytes"
	"errors"
	"fmt"
	"io"
)

// maxLine bounds the length of a line of a text or lackey trace, so that a
// file without newlines never makes a reader buffer it whole.
const maxLine = 64 << 10

// lineReader hands out the lines of a text file one at a time, without
// copying them: a line is valid until the next call. Memory is one buffer
// whatever the file's length.
type lineReader struct {
	name       string
	r          io.Reader
	buf        []byte
	start, end int  // unread bytes: buf[start:end]
	eof        bool // r is drained
	line       int  // number of the line last returned
	err        error
}

func newLineReader(name string, r io.Reader) *lineReader {
	return &lineReader{name: name, r: r, buf: make([]byte, 4*maxLine)}
}

// next returns the next line without its line ending; ok is false at the end
// of the file or after an error (see failed).
func (l *lineReader) next() (line []byte, ok bool) {
	for {
		if l.err != nil {
			return nil, false
		}
		rest := l.buf[l.start:l.end]
		// Lines are short: look for the newline by hand before calling
		// the vectorised search.
		i := -1
		for j := 0; j < len(rest) && j < 48; j++ {
			if rest[j] == '\n' {
				i = j
				break
			}
		}
		if i < 0 && len(rest) > 48 {
			if i = bytes.IndexByte(rest[48:], '\n'); i >= 0 {
				i += 48
			}
		}
		switch {
		case i > maxLine || i < 0 && len(rest) > maxLine:
			l.line++
			l.err = fmt.Errorf("%s:%d: line longer than %d bytes: not a trace line", l.name, l.line, maxLine)
			return nil, false
		case i >= 0:
			l.start += i + 1
			line = rest[:i]
		case l.eof:
			if len(rest) == 0 {
				l.err = io.EOF
				return nil, false
			}
			l.start = l.end
			line = rest
		default:
			l.fill()
			continue
		}
		l.line++
		if n := len(line); n > 0 && line[n-1] == '\r' {
			line = line[:n-1]
		}
		return line, true
	}
}

// fill moves the unread bytes to the front and reads more.
func (l *lineReader) fill() {
	n := copy(l.buf, l.buf[l.start:l.end])
	l.start, l.end = 0, n
	for l.end < len(l.buf) {
		k, err := l.r.Read(l.buf[l.end:])
		l.end += k
		if errors.Is(err, io.EOF) {
			l.eof = true
			return
		}
		if err != nil {
			l.err = fmt.Errorf("%s:%d: %w", l.name, l.line+1, err)
			return
		}
		if k > 0 {
			return
		}
	}
}

// failed returns the error that stopped next, or nil at a clean end.
func (l *lineReader) failed() error {
	if errors.Is(l.err, io.EOF) {
		return nil
	}
	return l.err
}

// fields splits b at runs of spaces and tabs into at most len(dst) fields
// and returns how many it found (more than len(dst) when b has more).
func fields(b []byte, dst [][]byte) int {
	n := 0
	i := 0
	for i < len(b) {
		for i < len(b) && (b[i] == ' ' || b[i] == '\t') {
			i++
		}
		if i == len(b) {
			break
		}
		j := i
		for j < len(b) && b[j] != ' ' && b[j] != '\t' {
			j++
		}
		if n < len(dst) {
			dst[n] = b[i:j]
		}
		n++
		i = j
	}
	return n
}
