package memtrace

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// The text format (".memtxt") holds one access per line:
//
//	# a comment; blank lines are ignored
//	page_size 4096        optional, before the first access (default 4096)
//	pages 16              optional hint: page numbers lie in [0, 16)
//	W 0                   write page 0, no compute before it
//	R 0x1f 250ns          compute 250ns, then read page 0x1f
//	r 7 1.5us             the operation letter is case-insensitive
//
// Page numbers are decimal or 0x-prefixed hexadecimal; gaps are Go durations
// ("250ns", "1.5us", "0").

// ParseText parses a text trace; name appears in error messages.
func ParseText(name string, data []byte) (Header, []Access, error) {
	h := Header{PageSize: DefaultPageSize}
	var acc []Access
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		text := sc.Text()
		if i := strings.IndexByte(text, '#'); i >= 0 {
			text = text[:i]
		}
		f := strings.Fields(text)
		if len(f) == 0 {
			continue
		}
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%s:%d: %s", name, line, fmt.Sprintf(format, args...))
		}
		switch strings.ToLower(f[0]) {
		case "page_size":
			if len(acc) > 0 {
				return h, nil, bad("page_size must come before the first access")
			}
			if len(f) != 2 {
				return h, nil, bad("want \"page_size BYTES\"")
			}
			ps, err := strconv.Atoi(f[1])
			if err != nil {
				return h, nil, bad("page_size %q is not a number", f[1])
			}
			if err := checkPageSize(ps); err != nil {
				return h, nil, bad("%v", err)
			}
			h.PageSize = ps
		case "pages":
			if len(f) != 2 {
				return h, nil, bad("want \"pages N\"")
			}
			n, err := strconv.ParseUint(f[1], 0, 64)
			if err != nil || n > MaxPage+1 {
				return h, nil, bad("pages %q: want a count up to %d", f[1], uint64(MaxPage)+1)
			}
			h.Pages = n
		case "r", "w":
			if len(f) < 2 || len(f) > 3 {
				return h, nil, bad("want \"R|W PAGE [GAP]\", e.g. \"W 0x1f 250ns\"")
			}
			page, err := strconv.ParseUint(f[1], 0, 64)
			if err != nil || page > MaxPage {
				return h, nil, bad("page %q: want a page number (decimal or 0x-hex) up to %#x", f[1], uint64(MaxPage))
			}
			var gap time.Duration
			if len(f) == 3 {
				if f[2] != "0" {
					gap, err = time.ParseDuration(f[2])
					if err != nil {
						return h, nil, bad("gap %q: want a duration such as 250ns or 1.5us", f[2])
					}
				}
				if gap < 0 || gap > maxGap {
					return h, nil, bad("gap %v: want 0 to 1h", gap)
				}
			}
			acc = append(acc, Access{Page: page, Gap: gap, Write: f[0] == "w" || f[0] == "W"})
		default:
			return h, nil, bad("%q: want R or W (an access), page_size or pages", f[0])
		}
	}
	if err := sc.Err(); err != nil {
		return h, nil, fmt.Errorf("%s:%d: %v", name, line+1, err)
	}
	if h.Pages != 0 {
		for i, a := range acc {
			if a.Page >= h.Pages {
				return h, nil, fmt.Errorf("%s: access %d touches page %d, beyond the declared pages %d", name, i+1, a.Page, h.Pages)
			}
		}
	}
	return h, acc, nil
}

// WriteText writes accesses in the text format.
func WriteText(w io.Writer, h Header, acc []Access) error {
	bw := bufio.NewWriter(w)
	if h.PageSize != 0 && h.PageSize != DefaultPageSize {
		fmt.Fprintf(bw, "page_size %d\n", h.PageSize)
	}
	if h.Pages != 0 {
		fmt.Fprintf(bw, "pages %d\n", h.Pages)
	}
	for _, a := range acc {
		op := byte('R')
		if a.Write {
			op = 'W'
		}
		if a.Gap == 0 {
			fmt.Fprintf(bw, "%c %d\n", op, a.Page)
		} else {
			fmt.Fprintf(bw, "%c %d %v\n", op, a.Page, a.Gap)
		}
	}
	return bw.Flush()
}
