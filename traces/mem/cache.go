package memtrace

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
)

// ConvertResult says what Convert read and wrote.
type ConvertResult struct {
	// Format is the input's format.
	Format Format
	// Header is the binary output's header. A lackey recording's pages
	// are known only at its end, after the header is written: its header
	// says 0 (unknown) and Stats.Pages holds the count.
	Header Header
	Stats  Stats
	// Lines and DataAccesses count a lackey recording's lines and data
	// accesses.
	Lines, DataAccesses uint64
}

// Convert reads a trace of any format from r, as a stream, and writes it to
// w in the binary form (version BinaryVersion). Memory stays bounded by the
// decoder's and encoder's buffers (and, for lackey, the page renumbering,
// which grows with the footprint). name gives the format by its extension
// and appears in errors.
func Convert(w io.Writer, name string, r io.Reader, lackey LackeyOptions) (*ConvertResult, error) {
	return ConvertTo(w, Binary, name, r, lackey)
}

// ConvertTo is Convert to the binary or the text form.
func ConvertTo(w io.Writer, to Format, name string, r io.Reader, lackey LackeyOptions) (*ConvertResult, error) {
	h, src, err := OpenReaderWith(name, r, lackey)
	if err != nil {
		return nil, err
	}
	res := &ConvertResult{Header: h}
	switch src.(type) {
	case *Reader:
		res.Format = Binary
	case *TextReader:
		res.Format = Text
	case *LackeyReader:
		res.Format = Lackey
	}
	var out interface {
		Write(...Access) error
		Close() error
	}
	switch to {
	case Binary:
		if out, err = NewWriter(w, h); err != nil {
			return nil, err
		}
	case Text:
		out = NewTextWriter(w, h)
	default:
		return nil, fmt.Errorf("convert %s: cannot write the %s format (want binary or text)", name, to)
	}
	var c statsCounter
	buf := make([]Access, 4096)
	for {
		n, rerr := src.Read(buf)
		c.add(buf[:n])
		if err := out.Write(buf[:n]...); err != nil {
			return nil, fmt.Errorf("%s: write the %s form: %w", name, to, err)
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			return nil, rerr
		}
	}
	if err := out.Close(); err != nil {
		return nil, fmt.Errorf("%s: write the %s form: %w", name, to, err)
	}
	res.Stats = c.stats()
	if l, ok := src.(*LackeyReader); ok {
		res.Lines, res.DataAccesses = l.Lines(), l.DataAccesses()
	}
	return res, nil
}

// File is a trace file to prepare: its name (for the format and errors),
// its size in bytes, and how to read it, possibly more than once.
type File struct {
	Name string
	Size int64
	Open func() (io.ReadCloser, error)
}

// OSFile returns the File of a path on disk.
func OSFile(path string) (File, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return File{}, err
	}
	if fi.IsDir() {
		return File{}, fmt.Errorf("%s is a directory, not a trace", path)
	}
	return File{Name: path, Size: fi.Size(), Open: func() (io.ReadCloser, error) { return os.Open(path) }}, nil
}

// BytesFile returns the File of a trace held in memory.
func BytesFile(name string, data []byte) File {
	return File{Name: name, Size: int64(len(data)), Open: func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}}
}

// Prepared is a trace ready to replay: in the binary form, with its header
// and statistics known. Open it once per replay; every Open reads from the
// start.
type Prepared struct {
	Name string
	// Format is the format of the file as given.
	Format Format
	// Header is the binary form's header; Stats the trace's statistics.
	Header Header
	Stats  Stats
	// Cached is the path of the binary form in the cache, when the trace
	// was converted there ("" when it is held in memory or replayed from
	// its own binary file).
	Cached string

	data []byte // the binary form, for small traces
	file File   // the file itself, when it is a large binary trace
}

// Open returns a reader of the binary form, and what to close after it.
func (p *Prepared) Open() (*Reader, io.Closer, error) {
	var rc io.ReadCloser
	var err error
	switch {
	case p.data != nil:
		rc = io.NopCloser(bytes.NewReader(p.data))
	case p.Cached != "":
		rc, err = os.Open(p.Cached)
	default:
		rc, err = p.file.Open()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", p.Name, err)
	}
	name := p.Name
	if p.Cached != "" {
		name = p.Cached + " (converted from " + p.Name + ")"
	}
	r, err := NewReader(name, rc)
	if err != nil {
		rc.Close()
		return nil, nil, err
	}
	return r, rc, nil
}

// SmallTrace is the size up to which Prepare converts a trace in memory
// instead of through the cache directory.
const SmallTrace = 1 << 20

// CacheDirEnv names the environment variable that overrides the cache
// directory (DefaultCacheDir).
const CacheDirEnv = "TRACEBED_CACHE_DIR"

// converterVersion changes whenever the conversion of a text or lackey
// trace would give different accesses, so that older cache entries are
// not reused.
const converterVersion = 1

// Cache holds text and lackey traces converted to the binary form, and the
// statistics of large binary traces, each named by the SHA-256 of the
// file's content (and the import options), so that a trace is parsed once
// and then replayed from its binary form by every host of every run.
// Entries are never stale (a changed file has another hash); the directory
// may be deleted at any time.
type Cache struct {
	// Dir is the cache directory; "" means DefaultCacheDir().
	Dir string
}

// DefaultCacheDir is $TRACEBED_CACHE_DIR if set, else "tracebed/traces" in
// the user's cache directory (~/.cache on Linux, ~/Library/Caches on
// macOS), else in the system's temporary directory.
func DefaultCacheDir() string {
	if d := os.Getenv(CacheDirEnv); d != "" {
		return d
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "tracebed", "traces")
	}
	return filepath.Join(os.TempDir(), "tracebed-cache", "traces")
}

func (c Cache) dir() string {
	if c.Dir != "" {
		return c.Dir
	}
	return DefaultCacheDir()
}

// cacheEntry is the sidecar of a cached trace: <key>.json.
type cacheEntry struct {
	Schema       string `json:"schema"`
	Name         string `json:"name"` // the file it was made from, first
	Format       Format `json:"format"`
	PageSize     int    `json:"page_size"`
	Pages        uint64 `json:"pages"`
	Stats        Stats  `json:"stats"`
	Lines        uint64 `json:"lines,omitempty"`
	DataAccesses uint64 `json:"data_accesses,omitempty"`
}

const cacheSchema = "tracebed.tracecache/v1"

// Prepare makes a trace ready to replay. A binary trace is replayed from
// its own file (its statistics cached when it is large). A text or lackey
// trace is converted to the binary form: in memory when it is small
// (SmallTrace), else into the cache directory, where later runs find it.
// Lackey output is imported with opts.
func (c Cache) Prepare(f File, opts LackeyOptions) (*Prepared, error) {
	if err := opts.check(); err != nil {
		return nil, fmt.Errorf("%s: %v", f.Name, err)
	}
	format, err := sniff(f)
	if err != nil {
		return nil, err
	}
	p := &Prepared{Name: f.Name, Format: format}
	if f.Size <= SmallTrace {
		rc, err := f.Open()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Name, err)
		}
		defer rc.Close()
		data, err := io.ReadAll(io.LimitReader(rc, SmallTrace+1))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Name, err)
		}
		if format == Binary {
			info, err := Inspect(f.Name, bytes.NewReader(data), InspectOptions{})
			if err != nil {
				return nil, err
			}
			p.Header, p.Stats, p.data = info.Header, info.Stats, data
			return p, nil
		}
		var b bytes.Buffer
		res, err := Convert(&b, f.Name, bytes.NewReader(data), opts)
		if err != nil {
			return nil, err
		}
		p.Header, p.Stats, p.data = res.Header, res.Stats, b.Bytes()
		return p, nil
	}
	sum, err := hashFile(f)
	if err != nil {
		return nil, err
	}
	key := sum
	if format == Lackey {
		key += fmt.Sprintf("-l%d-%s", opts.PageSize, strconv.FormatFloat(opts.NsPerInstruction, 'g', -1, 64))
		if opts.KeepAddresses {
			key += "-keep"
		}
	}
	key += fmt.Sprintf("-v%d.%d", BinaryVersion, converterVersion)
	dir := c.dir()
	side := filepath.Join(dir, key+".json")
	bin := filepath.Join(dir, key+".memtrace")
	if e, ok := readEntry(side); ok {
		p.Stats = e.Stats
		p.Header = Header{PageSize: e.PageSize, Pages: e.Pages}
		if format == Binary {
			p.file = f
			return p, nil
		}
		if _, err := os.Stat(bin); err == nil {
			p.Cached = bin
			return p, nil
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("%s: trace cache: %w (set %s to another directory)", f.Name, err, CacheDirEnv)
	}
	e := cacheEntry{Schema: cacheSchema, Name: f.Name, Format: format}
	if format == Binary {
		rc, err := f.Open()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Name, err)
		}
		info, err := Inspect(f.Name, rc, InspectOptions{})
		rc.Close()
		if err != nil {
			return nil, err
		}
		e.PageSize, e.Pages, e.Stats = info.Header.PageSize, info.Header.Pages, info.Stats
		p.file = f
	} else {
		res, err := convertTo(bin, f, opts)
		if err != nil {
			return nil, err
		}
		e.PageSize, e.Pages, e.Stats = res.Header.PageSize, res.Header.Pages, res.Stats
		e.Lines, e.DataAccesses = res.Lines, res.DataAccesses
		p.Cached = bin
	}
	if err := writeEntry(side, e); err != nil {
		return nil, fmt.Errorf("%s: trace cache: %w (set %s to another directory)", f.Name, err, CacheDirEnv)
	}
	p.Header, p.Stats = Header{PageSize: e.PageSize, Pages: e.Pages}, e.Stats
	return p, nil
}

// sniff returns the format of f from its name or first bytes.
func sniff(f File) (Format, error) {
	rc, err := f.Open()
	if err != nil {
		return "", fmt.Errorf("%s: %w", f.Name, err)
	}
	defer rc.Close()
	head := make([]byte, sniffLen)
	n, err := io.ReadFull(rc, head)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return "", fmt.Errorf("%s: %w", f.Name, err)
	}
	return DetectFormat(f.Name, head[:n])
}

func hashFile(f File) (string, error) {
	rc, err := f.Open()
	if err != nil {
		return "", fmt.Errorf("%s: %w", f.Name, err)
	}
	defer rc.Close()
	h := sha256.New()
	if _, err := io.Copy(h, rc); err != nil {
		return "", fmt.Errorf("%s: %w", f.Name, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// convertTo converts f into the file bin, through a temporary file renamed
// into place, so that no reader ever sees half an entry.
func convertTo(bin string, f File, opts LackeyOptions) (*ConvertResult, error) {
	rc, err := f.Open()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Name, err)
	}
	defer rc.Close()
	tmp, err := os.CreateTemp(filepath.Dir(bin), "convert-*.tmp")
	if err != nil {
		return nil, fmt.Errorf("%s: trace cache: %w (set %s to another directory)", f.Name, err, CacheDirEnv)
	}
	defer os.Remove(tmp.Name())
	res, err := Convert(tmp, f.Name, rc, opts)
	if err == nil {
		err = tmp.Close()
	} else {
		tmp.Close()
	}
	if err != nil {
		return nil, err
	}
	if err := os.Rename(tmp.Name(), bin); err != nil {
		return nil, fmt.Errorf("%s: trace cache: %w", f.Name, err)
	}
	return res, nil
}

func readEntry(path string) (cacheEntry, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return cacheEntry{}, false
	}
	var e cacheEntry
	if json.Unmarshal(data, &e) != nil || e.Schema != cacheSchema || checkPageSize(e.PageSize) != nil ||
		e.Stats.Compute < 0 || e.Stats.Compute > math.MaxInt64/2 {
		return cacheEntry{}, false
	}
	return e, true
}

func writeEntry(path string, e cacheEntry) error {
	data, err := json.MarshalIndent(e, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "entry-*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
