package memtrace

import (
	"io"
	"math/rand/v2"
)

// SyntheticLackey is an io.Reader of made-up valgrind lackey output, for
// benchmarks and tests that need recordings of any size without running
// valgrind: Size bytes of lines shaped like a real recording (instruction
// lines in a code region, loads, stores and modifies of 1 to 8 bytes, and
// now and then an access straddling two pages), driven by a seeded source.
//
// The program it pretends to record sweeps an array of Pages pages in
// order, with stack traffic and random accesses to a hot set of a sixteenth
// of the array between the sweeps' accesses: so it has a footprint of
// about Pages pages, sequential and random reuse, and reads and writes.
type SyntheticLackey struct {
	Size  int64 // bytes to produce (the last line may end a little later)
	Pages int   // the array's pages (default 4096)
	Seed  uint64

	rng      *rand.Rand
	n        int64
	pc       uint64
	sweep    uint64
	pending  []byte // bytes produced, not yet read, from at
	at       int
	started  bool
	finished bool
}

const (
	synthCode  = 0x04000000
	synthHeap  = 0x05000000
	synthStack = 0x1ffeff0000
)

// Read implements io.Reader.
func (s *SyntheticLackey) Read(p []byte) (int, error) {
	if !s.started {
		s.started = true
		if s.Pages <= 0 {
			s.Pages = 4096
		}
		s.rng = rand.New(rand.NewPCG(s.Seed, 0x6c61636b6579)) // "lackey"
		s.pc = synthCode
		s.pending = append(s.pending, "==42== Lackey, an example Valgrind tool\n==42== Command: ./synthetic\n"...)
	}
	k := 0
	for k < len(p) {
		if s.at < len(s.pending) {
			c := copy(p[k:], s.pending[s.at:])
			k += c
			s.at += c
			continue
		}
		if s.finished {
			break
		}
		if s.n >= s.Size {
			s.finished = true
			s.pending, s.at = append(s.pending[:0], "==42== \n"...), 0
			continue
		}
		s.pending, s.at = s.line(s.pending[:0]), 0
		s.n += int64(len(s.pending))
	}
	if k == 0 && s.finished && s.at == len(s.pending) {
		return 0, io.EOF
	}
	return k, nil
}

// line appends one or a few lines of the pretend program.
func (s *SyntheticLackey) line(b []byte) []byte {
	r := s.rng.Uint32()
	// About two instructions per data access, as in compiled loops.
	if r%3 != 0 {
		b = append(b, 'I', ' ', ' ')
		b = appendHex(b, s.pc)
		b = append(b, ',', byte('1'+r>>8%7), '\n')
		s.pc += uint64(1 + r>>12%7)
		if s.pc > synthCode+1<<16 {
			s.pc = synthCode
		}
		return b
	}
	var addr uint64
	op := byte('L')
	size := uint64(8)
	switch k := r >> 4 % 16; {
	case k < 9: // the sweep
		addr = synthHeap + s.sweep
		s.sweep = (s.sweep + 8) % (uint64(s.Pages) * 4096)
		if k < 3 {
			op = 'S'
		}
	case k < 13: // the hot set
		hot := max(1, uint64(s.Pages)/16)
		addr = synthHeap + (uint64(s.rng.Uint32())%(hot*4096))&^3
		size = 4
		if k == 12 {
			op = 'M'
		}
	case k < 15: // the stack
		addr = synthStack + uint64(r>>8%512)*8
		op = 'S'
	default: // an unaligned access that may straddle two pages
		addr = synthHeap + uint64(s.rng.Uint32())%(uint64(s.Pages)*4096)
		size = 16
	}
	b = append(b, ' ', op, ' ')
	b = appendHex(b, addr)
	b = append(b, ',')
	if size >= 10 {
		b = append(b, byte('0'+size/10))
	}
	return append(b, byte('0'+size%10), '\n')
}

func appendHex(b []byte, v uint64) []byte {
	const digits = "0123456789abcdef"
	var tmp [16]byte
	i := len(tmp)
	for v != 0 || i > len(tmp)-8 {
		i--
		tmp[i] = digits[v&15]
		v >>= 4
	}
	return append(b, tmp[i:]...)
}
