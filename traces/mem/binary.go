package memtrace

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/bits"
	"time"
)

// The binary format (".memtrace"), all integers little-endian or unsigned
// LEB128 varints ("uvarint"):
//
//	header:  "TBMT"  version (1 byte, = 2)  log2(page size) (1 byte)
//	         uvarint pages hint (0 = unknown)
//	         uint32  CRC-32C (Castagnoli) of the header bytes before it
//	chunks:  uvarint n       records in the chunk; 0 ends the trace
//	         uvarint len     payload bytes
//	         payload         n records
//	         uint32          CRC-32C of the payload
//	record:  uvarint zigzag(page - previous page) << 1 | write
//	         uvarint gap in nanoseconds (at most MaxGap)
//
// The previous page starts at 0 and runs across chunks, so sequential scans
// cost two bytes per access. Chunks bound the damage of a corrupt byte to
// one checksum-verified unit and let readers refuse truncated files: a trace
// without its end marker is an error, never a silently shorter trace.
//
// Version 1, written by tracebed before the header had a checksum, is the
// same without the header's CRC. Readers still read it, but a corrupt
// header byte (the page size, say) goes unnoticed there; 'tracebed trace
// convert OLD.memtrace NEW.memtrace' rewrites a file as version 2.
const (
	binaryMagic = "TBMT"
	// BinaryVersion is the version Writer writes.
	BinaryVersion = 2
	binaryV1      = 1
	// chunkRecords is how many records a Writer puts in a chunk.
	chunkRecords = 4096
	// Limits a Reader enforces, so that a corrupt length never makes it
	// allocate without bound.
	maxChunkRecords = 1 << 20
	maxChunkBytes   = maxChunkRecords * 2 * binary.MaxVarintLen64
)

// MaxGap bounds one compute gap of a trace (an hour), far above any real
// compute gap; every format refuses longer ones.
const MaxGap = time.Hour

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Writer writes a binary trace. Call Close to write the end marker; a trace
// without it is rejected by readers.
type Writer struct {
	w       *bufio.Writer
	prev    uint64
	n       int
	payload []byte
	err     error
	closed  bool
}

// NewWriter writes h and returns a Writer for the records.
func NewWriter(w io.Writer, h Header) (*Writer, error) {
	if h.PageSize == 0 {
		h.PageSize = DefaultPageSize
	}
	if err := checkPageSize(h.PageSize); err != nil {
		return nil, err
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	if h.Pages > MaxPage+1 {
		return nil, fmt.Errorf("memtrace: pages hint %d exceeds %d", h.Pages, uint64(MaxPage)+1)
	}
	hdr := append([]byte(binaryMagic), BinaryVersion, byte(bits.TrailingZeros(uint(h.PageSize))))
	hdr = binary.AppendUvarint(hdr, h.Pages)
	hdr = binary.LittleEndian.AppendUint32(hdr, crc32.Checksum(hdr, castagnoli))
	if _, err := bw.Write(hdr); err != nil {
		return nil, err
	}
	return &Writer{w: bw, payload: make([]byte, 0, chunkRecords*4)}, nil
}

// Write appends accesses to the trace.
func (w *Writer) Write(acc ...Access) error {
	if w.err != nil {
		return w.err
	}
	if w.closed {
		return errors.New("memtrace: write after Close")
	}
	for _, a := range acc {
		if a.Page > MaxPage {
			w.err = fmt.Errorf("memtrace: page %#x exceeds the largest page number %#x", a.Page, uint64(MaxPage))
			return w.err
		}
		if a.Gap < 0 || a.Gap > MaxGap {
			w.err = fmt.Errorf("memtrace: gap %v out of range [0, %v]", a.Gap, MaxGap)
			return w.err
		}
		v := zigzag(int64(a.Page-w.prev)) << 1
		if a.Write {
			v |= 1
		}
		w.payload = binary.AppendUvarint(w.payload, v)
		w.payload = binary.AppendUvarint(w.payload, uint64(a.Gap))
		w.prev = a.Page
		w.n++
		if w.n == chunkRecords {
			w.flushChunk()
		}
	}
	return w.err
}

func (w *Writer) flushChunk() {
	if w.n == 0 || w.err != nil {
		return
	}
	var hdr [2 * binary.MaxVarintLen64]byte
	k := binary.PutUvarint(hdr[:], uint64(w.n))
	k += binary.PutUvarint(hdr[k:], uint64(len(w.payload)))
	var sum [4]byte
	binary.LittleEndian.PutUint32(sum[:], crc32.Checksum(w.payload, castagnoli))
	for _, b := range [][]byte{hdr[:k], w.payload, sum[:]} {
		if _, err := w.w.Write(b); err != nil {
			w.err = err
			return
		}
	}
	w.payload = w.payload[:0]
	w.n = 0
}

// Close writes the last chunk and the end marker and flushes. It does not
// close the underlying writer.
func (w *Writer) Close() error {
	if w.closed {
		return w.err
	}
	w.flushChunk()
	w.closed = true
	if w.err != nil {
		return w.err
	}
	if err := w.w.WriteByte(0); err != nil {
		w.err = err
		return err
	}
	w.err = w.w.Flush()
	return w.err
}

// WriteBinary writes a whole trace.
func WriteBinary(w io.Writer, h Header, acc []Access) error {
	tw, err := NewWriter(w, h)
	if err != nil {
		return err
	}
	if err := tw.Write(acc...); err != nil {
		return err
	}
	return tw.Close()
}

// Reader decodes a binary trace. It implements Source.
type Reader struct {
	name    string
	version int
	r       *bufio.Reader
	off     int64 // bytes consumed, for error messages
	h       Header
	prev    uint64
	record  uint64 // records decoded so far
	payload []byte
	pos     int // position in payload
	left    int // records left in the current chunk
	chunkAt int64
	done    bool
	err     error
}

// NewReader reads the header of a binary trace; name appears in errors.
func NewReader(name string, r io.Reader) (*Reader, error) {
	rd := &Reader{name: name, r: bufio.NewReaderSize(r, 64<<10)}
	var fixed [6]byte
	if _, err := io.ReadFull(rd.r, fixed[:]); err != nil {
		return nil, rd.errorf("header: %v (a binary trace starts with %q)", noEOF(err), binaryMagic)
	}
	if string(fixed[:4]) != binaryMagic {
		return nil, rd.errorf("not a binary memory trace: starts with %q, want %q", fixed[:4], binaryMagic)
	}
	rd.off = 4 // errors about the version name its byte
	rd.version = int(fixed[4])
	if rd.version != BinaryVersion && rd.version != binaryV1 {
		return nil, rd.errorf("binary trace version %d is not supported (this tracebed reads versions %d and %d)", fixed[4], binaryV1, BinaryVersion)
	}
	rd.off = 6
	hdr := append([]byte(nil), fixed[:]...)
	var pages uint64
	var perr error
	// The pages hint, keeping its bytes for the header checksum.
	for i := 0; ; i++ {
		c, err := rd.r.ReadByte()
		if err != nil {
			perr = noEOF(err)
			break
		}
		rd.off++
		hdr = append(hdr, c)
		if i == binary.MaxVarintLen64-1 && c > 1 || i >= binary.MaxVarintLen64 {
			perr = errors.New("varint overflows 64 bits")
			break
		}
		pages |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			break
		}
	}
	if rd.version >= 2 {
		// Check the header's checksum before believing any of it.
		if perr != nil {
			return nil, rd.errorf("header: pages hint: %v", perr)
		}
		var sum [4]byte
		if _, err := io.ReadFull(rd.r, sum[:]); err != nil {
			return nil, rd.errorf("header: checksum: %v", noEOF(err))
		}
		rd.off += 4
		if got, want := crc32.Checksum(hdr, castagnoli), binary.LittleEndian.Uint32(sum[:]); got != want {
			return nil, fmt.Errorf("%s: header at byte 0: checksum mismatch (stored %08x, computed %08x): the header (page size, pages hint, bytes 0 to %d) is corrupt", name, want, got, rd.off-1)
		}
	}
	if fixed[5] > 30 {
		return nil, rd.errorf("header: page size 2^%d is out of range", fixed[5])
	}
	rd.h.PageSize = 1 << fixed[5]
	if err := checkPageSize(rd.h.PageSize); err != nil {
		return nil, rd.errorf("header: %v", err)
	}
	if perr != nil {
		return nil, rd.errorf("header: pages hint: %v", perr)
	}
	if pages > MaxPage+1 {
		return nil, rd.errorf("header: pages hint %d exceeds %d", pages, uint64(MaxPage)+1)
	}
	rd.h.Pages = pages
	return rd, nil
}

// Version returns the format version of the trace (1 or 2); version 1
// headers carry no checksum.
func (r *Reader) Version() int { return r.version }

// Header returns the trace's header.
func (r *Reader) Header() Header { return r.h }

func (r *Reader) errorf(format string, args ...any) error {
	return fmt.Errorf("%s: byte %d: %s", r.name, r.off, fmt.Sprintf(format, args...))
}

func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

func (r *Reader) uvarint() (uint64, error) {
	v, err := binary.ReadUvarint(byteCounter{r})
	if err != nil {
		return 0, noEOF(err)
	}
	return v, nil
}

type byteCounter struct{ r *Reader }

func (b byteCounter) ReadByte() (byte, error) {
	c, err := b.r.r.ReadByte()
	if err == nil {
		b.r.off++
	}
	return c, err
}

// nextChunk loads the next chunk, or marks the end of the trace.
func (r *Reader) nextChunk() error {
	r.chunkAt = r.off
	n, err := r.uvarint()
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return r.errorf("truncated: the trace ends without its end marker after %d records", r.record)
		}
		return r.errorf("chunk header: %v", err)
	}
	if n == 0 {
		if _, err := r.r.ReadByte(); err == nil {
			return r.errorf("unexpected data after the end marker")
		}
		r.done = true
		return nil
	}
	size, err := r.uvarint()
	if err != nil {
		return r.errorf("chunk header: %v", err)
	}
	if n > maxChunkRecords || size > maxChunkBytes || size < 2*n || size > n*2*binary.MaxVarintLen64 {
		return r.errorf("chunk of %d records in %d bytes is malformed", n, size)
	}
	if cap(r.payload) < int(size) {
		r.payload = make([]byte, size)
	}
	r.payload = r.payload[:size]
	if _, err := io.ReadFull(r.r, r.payload); err != nil {
		return r.errorf("truncated chunk (%d bytes announced): %v", size, noEOF(err))
	}
	r.off += int64(size)
	var sum [4]byte
	if _, err := io.ReadFull(r.r, sum[:]); err != nil {
		return r.errorf("truncated chunk checksum: %v", noEOF(err))
	}
	r.off += 4
	if got, want := crc32.Checksum(r.payload, castagnoli), binary.LittleEndian.Uint32(sum[:]); got != want {
		return fmt.Errorf("%s: chunk at byte %d: checksum mismatch (stored %08x, computed %08x): the file is corrupt", r.name, r.chunkAt, want, got)
	}
	r.pos, r.left = 0, int(n)
	return nil
}

// Read implements Source.
func (r *Reader) Read(buf []Access) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	k := 0
	for k < len(buf) {
		if r.left == 0 {
			if r.done {
				break
			}
			if err := r.nextChunk(); err != nil {
				r.err = err
				return k, err
			}
			continue
		}
		p := r.payload[r.pos:]
		v, n1 := uint64(0), 1
		if len(p) > 0 && p[0] < 0x80 {
			v = uint64(p[0])
		} else {
			v, n1 = uvarintLong(p)
		}
		if n1 <= 0 {
			r.err = r.recordError("page field is not a valid varint")
			return k, r.err
		}
		g, n2 := uint64(0), 1
		if p = p[n1:]; len(p) > 0 && p[0] < 0x80 {
			g = uint64(p[0])
		} else {
			g, n2 = uvarintLong(p)
		}
		if n2 <= 0 {
			r.err = r.recordError("gap field is not a valid varint")
			return k, r.err
		}
		page := r.prev + uint64(unzigzag(v>>1))
		if page > MaxPage {
			r.err = r.recordError(fmt.Sprintf("page %#x exceeds the largest page number", page))
			return k, r.err
		}
		if g > uint64(MaxGap) {
			r.err = r.recordError(fmt.Sprintf("gap %dns exceeds an hour", g))
			return k, r.err
		}
		buf[k] = Access{Page: page, Gap: time.Duration(g), Write: v&1 == 1}
		r.prev = page
		r.pos += n1 + n2
		r.left--
		r.record++
		k++
		if r.left == 0 && r.pos != len(r.payload) {
			r.err = fmt.Errorf("%s: chunk at byte %d: %d bytes left after its last record", r.name, r.chunkAt, len(r.payload)-r.pos)
			return k, r.err
		}
	}
	if k == 0 && r.done {
		return 0, io.EOF
	}
	return k, nil
}

// uvarintLong is binary.Uvarint, with two-byte varints first: Read decodes
// one-byte varints, most of a trace's gaps and many of its page deltas,
// itself.
func uvarintLong(b []byte) (uint64, int) {
	if len(b) >= 2 && b[0] >= 0x80 && b[1] < 0x80 {
		return uint64(b[0]&0x7f) | uint64(b[1])<<7, 2
	}
	return binary.Uvarint(b)
}

func (r *Reader) recordError(msg string) error {
	return fmt.Errorf("%s: chunk at byte %d: record %d: %s", r.name, r.chunkAt, r.record, msg)
}

func zigzag(v int64) uint64   { return uint64(v<<1) ^ uint64(v>>63) }
func unzigzag(u uint64) int64 { return int64(u>>1) ^ -int64(u&1) }
