package memtrace

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"math/bits"
	"time"

	"github.com/tracebed/tracebed/internal/problems"
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

func (o *LackeyOptions) check() error {
	if o.PageSize == 0 {
		o.PageSize = DefaultPageSize
	}
	if err := checkPageSize(o.PageSize); err != nil {
		return err
	}
	if o.NsPerInstruction < 0 || math.IsNaN(o.NsPerInstruction) || o.NsPerInstruction > 1e6 {
		return fmt.Errorf("NsPerInstruction %v: want 0 to 1e6", o.NsPerInstruction)
	}
	return nil
}

// ImportLackey converts a whole lackey recording (see LackeyReader) into
// page accesses held in memory. Large recordings should be streamed with
// NewLackeyReader, or converted once to the binary form (Cache).
func ImportLackey(name string, r io.Reader, opts LackeyOptions) (Header, []Access, error) {
	lr, err := NewLackeyReader(name, r, opts)
	if err != nil {
		return Header{}, nil, err
	}
	acc, err := ReadAll(lr)
	if err != nil {
		return Header{}, nil, err
	}
	return lr.Header(), acc, nil
}

// LackeyReader converts the output of
//
//	valgrind --tool=lackey --trace-mem=yes --log-file=prog.lackey ./prog
//
// into page accesses, as a stream. Lackey prints one line per instruction
// ("I  addr,size") and per data access (" L addr,size" load, " S" store,
// " M" modify, i.e. load and store). Data accesses become page accesses
// (stores and modifies are writes); an access that straddles a page
// boundary touches both pages; consecutive accesses to the same page merge
// into one page access (they cannot change replacement state). Instruction
// lines count towards the next access's compute gap. Valgrind's own
// messages ("==pid== …", "--pid-- …") are skipped.
//
// Memory is one line buffer plus, unless KeepAddresses is set, the map that
// renumbers pages densely: it grows with the pages the program touches (its
// footprint), never with the recording's length. The reader implements
// Source; Header's Pages is known only at the end (Pages of the header
// returned before then is 0, "unknown").
type LackeyReader struct {
	lr    *lineReader
	opts  LackeyOptions
	shift uint
	psPer int64 // picoseconds per instruction
	dense map[uint64]uint64
	// recent caches recent renumberings in front of the map: slot
	// p%len holds raw page p+1 (0: empty) and its number.
	recent  [1024][2]uint64
	instrs  int64 // instructions since the last emitted page access
	carryPs int64 // sub-nanosecond remainder carried between gaps
	cur     Access
	haveCur bool
	// out holds accesses closed but not yet returned: at most the pages
	// one line touches (an access of up to 1 MiB).
	out      []Access
	outAt    int
	data     uint64 // data accesses (L, S, M lines) read
	lines    uint64 // lackey lines (I, L, S, M) read
	emitted  uint64
	err      error
	problems *problems.List
}

// NewLackeyReader returns a reader of lackey output.
func NewLackeyReader(name string, r io.Reader, opts LackeyOptions) (*LackeyReader, error) {
	return newLackeyReader(name, r, opts, nil)
}

func newLackeyReader(name string, r io.Reader, opts LackeyOptions, p *problems.List) (*LackeyReader, error) {
	if err := opts.check(); err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	l := &LackeyReader{
		lr: newLineReader(name, r), opts: opts, problems: p,
		shift: uint(bits.TrailingZeros(uint(opts.PageSize))),
		psPer: int64(math.Round(opts.NsPerInstruction * 1000)),
		out:   make([]Access, 0, 8),
	}
	if !opts.KeepAddresses {
		l.dense = map[uint64]uint64{}
	}
	return l, nil
}

// Header returns the trace's header. With dense renumbering, Pages is the
// number of distinct pages seen so far: the whole trace's once Read has
// returned io.EOF.
func (l *LackeyReader) Header() Header {
	h := Header{PageSize: l.opts.PageSize}
	if l.dense != nil {
		h.Pages = uint64(len(l.dense))
	}
	return h
}

// DataAccesses returns how many data accesses (L, S and M lines) have been
// read.
func (l *LackeyReader) DataAccesses() uint64 { return l.data }

// Lines returns how many instruction and data lines have been read.
func (l *LackeyReader) Lines() uint64 { return l.lines }

// Read implements Source.
func (l *LackeyReader) Read(buf []Access) (int, error) {
	if l.err != nil {
		return 0, l.err
	}
	k := 0
	for k < len(buf) {
		if l.outAt < len(l.out) {
			n := copy(buf[k:], l.out[l.outAt:])
			l.outAt += n
			k += n
			if l.outAt == len(l.out) {
				l.out, l.outAt = l.out[:0], 0
			}
			continue
		}
		if l.fast(buf) {
			continue
		}
		b, ok := l.lr.next()
		if !ok {
			if err := l.lr.failed(); err != nil {
				l.err = err
				return k, err
			}
			if l.haveCur {
				l.out = append(l.out, l.cur)
				l.haveCur = false
				l.emitted++
				continue
			}
			if k > 0 {
				return k, nil
			}
			if l.emitted == 0 {
				l.err = fmt.Errorf("%s: no data accesses (was valgrind run with --tool=lackey --trace-mem=yes?)", l.lr.name)
				return 0, l.err
			}
			l.err = io.EOF
			return 0, io.EOF
		}
		if err := l.line(b); err != nil {
			err = fmt.Errorf("%s:%d: %w", l.lr.name, l.lr.line, err)
			if l.problems == nil || !l.problems.Add(err) {
				l.err = err
				return k, err
			}
		}
	}
	return k, nil
}

// fast parses well-formed lines straight from the line reader's buffer
// until one closes an access (or the buffer holds no whole line, or a line
// is not of the plain form): the common case, without the slow path's
// checks and error messages. It reports whether it queued accesses.
func (l *LackeyReader) fast(buf []Access) bool {
	lr := l.lr
	for lr.err == nil {
		rest := lr.buf[lr.start:lr.end]
		if len(rest) < 5 {
			return false
		}
		var i int
		var op byte
		switch c := rest[0]; {
		case c == 'I' && rest[1] == ' ':
			op, i = 'I', 2
		case c == ' ' && rest[2] == ' ' && (rest[1] == 'L' || rest[1] == 'S' || rest[1] == 'M'):
			op, i = rest[1], 3
		default:
			return false
		}
		for i < len(rest) && rest[i] == ' ' {
			i++
		}
		start := i
		var addr uint64
		for i < len(rest) {
			v := hexValue[rest[i]]
			if v == 0xff {
				break
			}
			addr = addr<<4 | uint64(v)
			i++
		}
		if i == start || i-start > 16 || i >= len(rest) || rest[i] != ',' {
			return false
		}
		i++
		start = i
		var size uint64
		for i < len(rest) && i-start < 8 && rest[i] >= '0' && rest[i] <= '9' {
			size = size*10 + uint64(rest[i]-'0')
			i++
		}
		if i == start || i >= len(rest) || rest[i] != '\n' || size == 0 || size > 1<<20 || addr > math.MaxUint64-size {
			return false
		}
		lr.start += i + 1
		lr.line++
		l.lines++
		if op == 'I' {
			l.instrs++
			continue
		}
		l.access(addr, size, op == 'S' || op == 'M')
		if len(l.out) > 0 {
			return true
		}
	}
	return false
}

// line handles one line of lackey output, queueing the accesses it closes.
func (l *LackeyReader) line(b []byte) error {
	if len(b) < 3 {
		if len(b) == 0 {
			return nil
		}
		return notLackey(b)
	}
	var op byte
	var rest []byte
	switch {
	case b[0] == 'I' && b[1] == ' ':
		op, rest = 'I', b[2:]
	case b[0] == ' ' && (b[1] == 'L' || b[1] == 'S' || b[1] == 'M') && b[2] == ' ':
		op, rest = b[1], b[3:]
	case b[0] == '=' && b[1] == '=', b[0] == '-' && b[1] == '-':
		return nil
	default:
		return notLackey(b)
	}
	for len(rest) > 0 && rest[0] == ' ' {
		rest = rest[1:]
	}
	comma := bytes.IndexByte(rest, ',')
	if comma <= 0 {
		return fmt.Errorf("want addr,size after %c", op)
	}
	// addr: up to 16 hexadecimal digits.
	var addr uint64
	if comma > 16 {
		return fmt.Errorf("address %q is not hexadecimal (at most 16 digits)", truncate(rest[:comma], 24))
	}
	for _, c := range rest[:comma] {
		d, ok := hexDigit(c)
		if !ok {
			return fmt.Errorf("address %q is not hexadecimal", truncate(rest[:comma], 24))
		}
		addr = addr<<4 | uint64(d)
	}
	// size: decimal, 1 to 1 MiB, then optional trailing blanks.
	digits := rest[comma+1:]
	for len(digits) > 0 && (digits[len(digits)-1] == ' ' || digits[len(digits)-1] == '\t') {
		digits = digits[:len(digits)-1]
	}
	var size uint64
	for _, c := range digits {
		if c < '0' || c > '9' || size > 1<<20 {
			size = 0
			break
		}
		size = size*10 + uint64(c-'0')
	}
	if size == 0 || size > 1<<20 {
		return fmt.Errorf("size %q: want 1 to 1048576 bytes", truncate(rest[comma+1:], 24))
	}
	l.lines++
	if op == 'I' {
		l.instrs++
		return nil
	}
	if addr > math.MaxUint64-size {
		return fmt.Errorf("access %#x+%d wraps the address space", addr, size)
	}
	l.access(addr, size, op == 'S' || op == 'M')
	return nil
}

// access records a data access of size bytes at addr: a touch of every
// page it spans.
func (l *LackeyReader) access(addr, size uint64, write bool) {
	l.data++
	for p, end := addr>>l.shift, (addr+size-1)>>l.shift; ; p++ {
		l.touch(p, write)
		if p == end {
			break
		}
	}
}

// touch records an access to raw page p: it merges into the current access
// when on the same page, else closes it (queueing it) and starts a new one.
func (l *LackeyReader) touch(p uint64, write bool) {
	if l.dense != nil {
		slot := &l.recent[p%uint64(len(l.recent))]
		if slot[0] == p+1 {
			p = slot[1]
		} else {
			d, ok := l.dense[p]
			if !ok {
				d = uint64(len(l.dense))
				l.dense[p] = d
			}
			slot[0], slot[1] = p+1, d
			p = d
		}
	}
	if l.haveCur && p == l.cur.Page {
		l.cur.Write = l.cur.Write || write
		return
	}
	if l.haveCur {
		l.out = append(l.out, l.cur)
		l.emitted++
	}
	ps := l.instrs*l.psPer + l.carryPs
	gap := ps / 1000
	l.carryPs = ps % 1000
	l.instrs = 0
	l.cur = Access{Page: p, Gap: time.Duration(min(gap, int64(MaxGap))), Write: write}
	l.haveCur = true
}

func notLackey(b []byte) error {
	return fmt.Errorf("%q is not a lackey line (want \"I  addr,size\" or \" L|S|M addr,size\")", truncate(b, 40))
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}
