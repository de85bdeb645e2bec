package memtrace

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math"
	"strconv"
	"time"
)

// LackeyOptions control how valgrind lackey output becomes a page trace.
type LackeyOptions struct {
	// PageSize in bytes (a power of two).
	PageSize int
	// NsPerInstruction converts the instructions lackey reports between
	// data accesses into compute gaps. The default, 0.25 ns, is an IPC of
	// about 1.3 at 3 GHz.
	NsPerInstruction float64
	// KeepAddresses keeps page numbers as address >> log2(PageSize). By
	// default pages are renumbered densely in order of first touch, so the
	// trace spans [0, distinct pages) and replays on a compact page table;
	// the replacement behaviour does not depend on the numbering.
	KeepAddresses bool
}

// DefaultLackeyOptions are used by Open for ".lackey" files.
func DefaultLackeyOptions() LackeyOptions {
	return LackeyOptions{PageSize: DefaultPageSize, NsPerInstruction: 0.25}
}

// ImportLackey converts the output of
//
//	valgrind --tool=lackey --trace-mem=yes --log-file=prog.lackey ./prog
//
// into page accesses. Lackey prints one line per instruction ("I  addr,size")
// and per data access (" L addr,size" load, " S" store, " M" modify, i.e.
// load and store). Data accesses become page accesses (stores and modifies
// are writes); an access that straddles a page boundary touches both pages;
// consecutive accesses to the same page merge into one page access (they
// cannot change replacement state). Instruction lines count towards the next
// access's compute gap. Valgrind's own messages ("==pid== …") are skipped.
func ImportLackey(name string, r io.Reader, opts LackeyOptions) (Header, []Access, error) {
	if opts.PageSize == 0 {
		opts.PageSize = DefaultPageSize
	}
	if err := checkPageSize(opts.PageSize); err != nil {
		return Header{}, nil, fmt.Errorf("%s: %v", name, err)
	}
	if opts.NsPerInstruction < 0 || math.IsNaN(opts.NsPerInstruction) || opts.NsPerInstruction > 1e6 {
		return Header{}, nil, fmt.Errorf("%s: NsPerInstruction %v: want 0 to 1e6", name, opts.NsPerInstruction)
	}
	shift := uint(0)
	for 1<<shift < opts.PageSize {
		shift++
	}
	psPerInstr := int64(math.Round(opts.NsPerInstruction * 1000))
	var (
		acc     []Access
		dense   = map[uint64]uint64{}
		instrs  int64 // instructions since the last emitted page access
		carryPs int64 // sub-nanosecond remainder carried between gaps
		last    = uint64(math.MaxUint64)
		haveAny bool
	)
	touch := func(page uint64, write bool) {
		if !opts.KeepAddresses {
			d, ok := dense[page]
			if !ok {
				d = uint64(len(dense))
				dense[page] = d
			}
			page = d
		}
		if haveAny && page == last {
			if write {
				acc[len(acc)-1].Write = true
			}
			return
		}
		ps := instrs*psPerInstr + carryPs
		gap := ps / 1000
		carryPs = ps % 1000
		instrs = 0
		acc = append(acc, Access{Page: page, Gap: time.Duration(min(gap, int64(maxGap))), Write: write})
		last, haveAny = page, true
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(b) == 0 || bytes.HasPrefix(b, []byte("==")) || bytes.HasPrefix(b, []byte("--")) {
			continue
		}
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%s:%d: %s", name, line, fmt.Sprintf(format, args...))
		}
		var op byte
		var rest []byte
		switch {
		case len(b) >= 3 && b[0] == 'I' && b[1] == ' ':
			op, rest = 'I', bytes.TrimLeft(b[1:], " ")
		case len(b) >= 3 && b[0] == ' ' && (b[1] == 'L' || b[1] == 'S' || b[1] == 'M') && b[2] == ' ':
			op, rest = b[1], bytes.TrimLeft(b[2:], " ")
		default:
			return Header{}, nil, bad("%q is not a lackey line (want \"I  addr,size\" or \" L|S|M addr,size\")", truncate(b, 40))
		}
		comma := bytes.IndexByte(rest, ',')
		if comma <= 0 {
			return Header{}, nil, bad("want addr,size after %c", op)
		}
		addr, err := strconv.ParseUint(string(rest[:comma]), 16, 64)
		if err != nil {
			return Header{}, nil, bad("address %q is not hexadecimal", truncate(rest[:comma], 24))
		}
		size, err := strconv.ParseUint(string(bytes.TrimSpace(rest[comma+1:])), 10, 32)
		if err != nil || size == 0 || size > 1<<20 {
			return Header{}, nil, bad("size %q: want 1 to 1048576 bytes", truncate(rest[comma+1:], 24))
		}
		if op == 'I' {
			instrs++
			continue
		}
		if addr > math.MaxUint64-size {
			return Header{}, nil, bad("access %#x+%d wraps the address space", addr, size)
		}
		write := op == 'S' || op == 'M'
		first, end := addr>>shift, (addr+size-1)>>shift
		for p := first; p <= end; p++ {
			touch(p, write)
		}
	}
	if err := sc.Err(); err != nil {
		return Header{}, nil, fmt.Errorf("%s:%d: %v", name, line+1, err)
	}
	if len(acc) == 0 {
		return Header{}, nil, fmt.Errorf("%s: no data accesses (was valgrind run with --tool=lackey --trace-mem=yes?)", name)
	}
	h := Header{PageSize: opts.PageSize}
	if !opts.KeepAddresses {
		h.Pages = uint64(len(dense))
	}
	return h, acc, nil
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}
