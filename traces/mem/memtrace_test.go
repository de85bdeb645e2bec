package memtrace

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

func sample() []Access {
	return []Access{
		{Page: 0, Write: true},
		{Page: 1, Gap: 100 * time.Nanosecond, Write: true},
		{Page: 2, Gap: 100 * time.Nanosecond},
		{Page: 1, Gap: 5 * time.Microsecond},
		{Page: 1 << 40, Gap: 1},
		{Page: 3, Write: true},
		{Page: MaxPage, Gap: time.Hour},
		{Page: 0},
	}
}

func encode(t testing.TB, h Header, acc []Access) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := WriteBinary(&b, h, acc); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func decode(t testing.TB, data []byte) (Header, []Access) {
	t.Helper()
	r, err := NewReader("t.memtrace", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	acc, err := ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return r.Header(), acc
}

func TestBinaryRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	random := make([]Access, 3*chunkRecords+17) // several chunks and a partial one
	for i := range random {
		random[i] = Access{Page: rng.Uint64N(1 << 20), Gap: time.Duration(rng.IntN(10000)), Write: rng.IntN(3) == 0}
	}
	seq := make([]Access, 10000)
	for i := range seq {
		seq[i] = Access{Page: uint64(i), Gap: 50}
	}
	for _, tc := range []struct {
		name string
		h    Header
		acc  []Access
	}{
		{"empty", Header{PageSize: 4096}, nil},
		{"sample", Header{PageSize: 4096, Pages: 1 << 56}, sample()},
		{"random", Header{PageSize: 1 << 21, Pages: 1 << 20}, random},
		{"sequential", Header{PageSize: 4096}, seq},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := encode(t, tc.h, tc.acc)
			h, got := decode(t, data)
			if h != tc.h {
				t.Errorf("header %+v, want %+v", h, tc.h)
			}
			if !slices.Equal(got, tc.acc) {
				t.Errorf("decoded %d accesses differ from the %d written", len(got), len(tc.acc))
			}
			if tc.name == "sequential" {
				// A sequential scan with small gaps costs two bytes an access.
				if per := float64(len(data)) / float64(len(seq)); per > 2.05 {
					t.Errorf("%.2f bytes per sequential access, want about 2", per)
				}
			}
		})
	}
}

func TestBinaryGolden(t *testing.T) {
	got := encode(t, Header{PageSize: 4096, Pages: 1 << 56}, sample())
	path := filepath.Join("testdata", "sample.memtrace")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("encoding changed: got % x\nwant % x\n(the format is versioned; bump BinaryVersion instead of changing it)", got, want)
	}
}

func TestBinaryErrors(t *testing.T) {
	good := encode(t, Header{PageSize: 4096}, sample())
	flip := func(i int) []byte {
		b := bytes.Clone(good)
		b[i] ^= 0x40
		return b
	}
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "header"},
		{"bad magic", append([]byte("XXXX"), good[4:]...), "not a binary memory trace"},
		{"bad version", func() []byte { b := bytes.Clone(good); b[4] = 9; return b }(), "byte 4: binary trace version 9 is not supported"},
		{"bad page size", func() []byte { b := bytes.Clone(good); b[5] = 3; return b }(), "page size"},
		{"truncated", good[:len(good)-1], "truncated: the trace ends without its end marker"},
		{"truncated in chunk", good[:20], "truncated chunk"},
		{"truncated header", good[:9], "header"},
		{"flipped page size", func() []byte { b := bytes.Clone(good); b[5] = 13; return b }(), "header at byte 0: checksum mismatch"},
		{"flipped pages hint", flip(6), "header at byte 0: checksum mismatch"},
		{"corrupt payload", flip(len(good) - 8), "checksum mismatch"},
		{"trailing data", append(bytes.Clone(good), 7), "after the end marker"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := NewReader("x.memtrace", bytes.NewReader(tc.data))
			if err == nil {
				_, err = ReadAll(r)
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if !strings.Contains(err.Error(), "x.memtrace") {
				t.Errorf("error %q does not name the file", err)
			}
		})
	}
}

func TestWriterRejectsOutOfRange(t *testing.T) {
	for _, a := range []Access{{Page: MaxPage + 1}, {Gap: -1}, {Gap: 2 * time.Hour}} {
		w, err := NewWriter(io.Discard, Header{})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Write(a); err == nil {
			t.Errorf("Write(%+v) succeeded", a)
		}
	}
	if _, err := NewWriter(io.Discard, Header{PageSize: 3000}); err == nil {
		t.Error("page size 3000 accepted")
	}
}

func TestTextParse(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		h    Header
		want []Access
		err  string
	}{
		{name: "basic", in: "# c\n\nW 0\nR 0x1f 250ns # hot\nr 7 1.5us\nw 3 0\n", h: Header{PageSize: 4096},
			want: []Access{{Page: 0, Write: true}, {Page: 31, Gap: 250}, {Page: 7, Gap: 1500}, {Page: 3, Write: true}}},
		{name: "directives", in: "page_size 8192\npages 4\nR 3\n", h: Header{PageSize: 8192, Pages: 4}, want: []Access{{Page: 3}}},
		{name: "bad op", in: "R 1\nX 2\n", err: "t.memtxt:2: \"X\": want R or W"},
		{name: "bad page", in: "R -1\n", err: "t.memtxt:1: page \"-1\""},
		{name: "bad gap", in: "R 1 fast\n", err: "t.memtxt:1: gap \"fast\""},
		{name: "negative gap", in: "R 1 -5ns\n", err: "gap -5ns"},
		{name: "too many fields", in: "R 1 2ns 3\n", err: "t.memtxt:1: want \"R|W PAGE [GAP]\""},
		{name: "late page size", in: "R 1\npage_size 8192\n", err: "t.memtxt:2: page_size must come before"},
		{name: "odd page size", in: "page_size 1000\n", err: "power of two"},
		{name: "beyond pages", in: "pages 2\nR 0\nR 2\n", err: "t.memtxt:3: page 2 is beyond the declared pages 2"},
		{name: "late pages", in: "R 0\npages 2\n", err: "t.memtxt:2: pages must come before the first access"},
		{name: "binary literal", in: "R 0b101\n", err: "t.memtxt:1: page \"0b101\": want a number"},
		{name: "octal literal", in: "R 0o17\n", err: "t.memtxt:1: page \"0o17\""},
		{name: "leading zero", in: "R 017\n", err: "t.memtxt:1: page \"017\": leading zero"},
		{name: "digit separator", in: "W 1_000\n", err: "t.memtxt:1: page \"1_000\""},
		{name: "sign", in: "W +5\n", err: "t.memtxt:1: page \"+5\""},
		{name: "empty hex", in: "W 0x\n", err: "t.memtxt:1: page \"0x\""},
		{name: "hex too large", in: "W 0x100000000000000\n", err: "t.memtxt:1: page \"0x100000000000000\""},
		{name: "hex pages", in: "pages 0x10\nW 0XF\n", h: Header{PageSize: 4096, Pages: 16}, want: []Access{{Page: 15, Write: true}}},
		{name: "hex page size", in: "page_size 0x1000\n", err: "page_size \"0x1000\": want a decimal number"},
		{name: "gap too long", in: "R 1 61m\n", err: "gap 1h1m0s: want 0 to 1h0m0s"},
		{name: "crlf", in: "W 1 5ns\r\nR 2\r\n", h: Header{PageSize: 4096}, want: []Access{{Page: 1, Gap: 5, Write: true}, {Page: 2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, acc, err := ParseText("t.memtxt", []byte(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if h != tc.h || !slices.Equal(acc, tc.want) {
				t.Errorf("got %+v %+v, want %+v %+v", h, acc, tc.h, tc.want)
			}
		})
	}
}

func TestTextRoundTrip(t *testing.T) {
	h := Header{PageSize: 8192, Pages: 1 << 56}
	var b bytes.Buffer
	if err := WriteText(&b, h, sample()); err != nil {
		t.Fatal(err)
	}
	h2, acc, err := ParseText("rt", b.Bytes())
	if err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	if h2 != h || !slices.Equal(acc, sample()) {
		t.Errorf("round trip changed the trace:\n%s", b.String())
	}
}

func TestLackeyImport(t *testing.T) {
	in := `==1== Lackey, an example Valgrind tool
==1== Command: ./x
I  04001b70,3
 S 1ffefff738,8
I  04001b73,4
I  04001b77,4
 L 1ffefff730,8
 M 0421c7f0,4
I  04001b7b,4
 L 0421cffc,8
==1== 
`
	opts := LackeyOptions{PageSize: 4096, NsPerInstruction: 1}
	h, acc, err := ImportLackey("x.lackey", strings.NewReader(in), opts)
	if err != nil {
		t.Fatal(err)
	}
	// Pages, renumbered densely: 0x1ffefff (stack) → 0, 0x421c → 1,
	// 0x421d → 2. The load of the stack merges into the store before it,
	// so its two instructions count towards the M; the straddling load
	// 0421cffc,8 merges into the M for page 0x421c and opens page 0x421d
	// after one more instruction.
	want := []Access{
		{Page: 0, Gap: 1, Write: true}, // one instruction before the store
		{Page: 1, Gap: 2, Write: true}, // M is a write
		{Page: 2, Gap: 1},              // the straddling load's second page
	}
	if h.Pages != 3 || h.PageSize != 4096 {
		t.Errorf("header %+v", h)
	}
	if !slices.Equal(acc, want) {
		t.Errorf("got %+v\nwant %+v", acc, want)
	}
	_, keep, err := ImportLackey("x.lackey", strings.NewReader(in), LackeyOptions{KeepAddresses: true})
	if err != nil {
		t.Fatal(err)
	}
	if keep[0].Page != 0x1ffefff || keep[1].Page != 0x421c || keep[2].Page != 0x421d {
		t.Errorf("KeepAddresses pages %#x %#x %#x", keep[0].Page, keep[1].Page, keep[2].Page)
	}
	for _, tc := range []struct{ in, err string }{
		{" X 1,2\n", "x.lackey:1: \" X 1,2\" is not a lackey line"},
		{" L zz,8\n", "x.lackey:1: address \"zz\""},
		{" L 10,0\n", "x.lackey:1: size \"0\""},
		{"I  10\n", "x.lackey:1: want addr,size"},
		{"==1== nothing\n", "no data accesses"},
		{" L ffffffffffffffff,8\n", "wraps the address space"},
	} {
		if _, _, err := ImportLackey("x.lackey", strings.NewReader(tc.in), opts); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("ImportLackey(%q): error %v, want %q", tc.in, err, tc.err)
		}
	}
}

func TestOpenDetectsFormats(t *testing.T) {
	bin := encode(t, Header{PageSize: 4096}, sample())
	for _, tc := range []struct {
		name string
		data []byte
		n    int
	}{
		{"a.memtrace", bin, len(sample())},
		{"noext", bin, len(sample())},
		{"a.memtxt", []byte("W 1\nR 2\n"), 2},
		{"a.lackey", []byte(" L 1000,4\n"), 1},
		{"valgrind.out", []byte("==7== Lackey\n S 2000,4\n"), 1},
	} {
		_, src, err := Open(tc.name, tc.data)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		acc, err := ReadAll(src)
		if err != nil || len(acc) != tc.n {
			t.Errorf("%s: %d accesses, %v; want %d", tc.name, len(acc), err, tc.n)
		}
	}
	if _, _, err := Open("empty", nil); err == nil {
		t.Error("empty file accepted")
	}
}

func TestSamples(t *testing.T) {
	entries, err := Files.ReadDir("samples")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		data, err := Files.ReadFile("samples/" + e.Name())
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := Extensions[filepath.Ext(e.Name())]; !ok {
			continue
		}
		n++
		_, src, err := Open(e.Name(), data)
		if err != nil {
			t.Fatal(err)
		}
		st, err := Summarize(src)
		if err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		if st.Accesses == 0 {
			t.Errorf("%s is empty", e.Name())
		}
		t.Logf("%s: %v", e.Name(), st)
	}
	if n < 3 {
		t.Errorf("%d samples, want at least 3", n)
	}
}

func TestReaderStopsAfterError(t *testing.T) {
	good := encode(t, Header{}, sample())
	r, err := NewReader("x", bytes.NewReader(good[:len(good)-1]))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]Access, 100)
	if _, err := r.Read(buf); err == nil {
		t.Fatal("no error on a truncated trace")
	}
	if _, err2 := r.Read(buf); err2 == nil || errors.Is(err2, io.EOF) {
		t.Errorf("second Read returned %v, want the same error again", err2)
	}
}

func FuzzBinary(f *testing.F) {
	var b bytes.Buffer
	WriteBinary(&b, Header{PageSize: 4096, Pages: 9}, sample())
	f.Add(b.Bytes())
	f.Add([]byte("TBMT\x01\x0c\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := NewReader("fuzz", bytes.NewReader(data))
		if err != nil {
			return
		}
		acc, err := ReadAll(r)
		if err != nil {
			return
		}
		// Whatever decodes must re-encode to a trace that decodes the same.
		var out bytes.Buffer
		if err := WriteBinary(&out, r.Header(), acc); err != nil {
			t.Fatalf("re-encoding a decoded trace failed: %v", err)
		}
		_, again := decode(t, out.Bytes())
		if !slices.Equal(acc, again) {
			t.Fatal("round trip changed a decoded trace")
		}
	})
}

func FuzzText(f *testing.F) {
	f.Add([]byte("page_size 8192\npages 4\nW 0\nR 0x3 250ns\n"))
	f.Add([]byte("R 1 1h\n# x\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, acc, err := ParseText("fuzz", data)
		if err != nil {
			return
		}
		var b bytes.Buffer
		if err := WriteText(&b, h, acc); err != nil {
			t.Fatal(err)
		}
		h2, acc2, err := ParseText("again", b.Bytes())
		if err != nil || h2 != h || !slices.Equal(acc, acc2) {
			t.Fatalf("text round trip failed: %v", err)
		}
	})
}

func FuzzLackey(f *testing.F) {
	f.Add([]byte("I  04001b70,3\n S 1ffefff738,8\n M 0421c7f0,4\n"))
	f.Add([]byte("==1== x\n L ffffffffffff,4096\n"))
	f.Add([]byte(" S 10000800,1048576\nI  1,1\n L 10000000,8\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, acc, err := ImportLackey("fuzz", bytes.NewReader(data), DefaultLackeyOptions())
		if err != nil {
			return
		}
		for _, a := range acc {
			if a.Page >= h.Pages {
				t.Fatalf("page %d outside the dense range [0, %d)", a.Page, h.Pages)
			}
		}
		// The fast path (plain lines) and the general one (CRLF line
		// endings) agree.
		if !bytes.Contains(data, []byte("\r")) {
			h2, acc2, err := ImportLackey("fuzz", bytes.NewReader(bytes.ReplaceAll(data, []byte("\n"), []byte("\r\n"))), DefaultLackeyOptions())
			if err != nil || h2 != h || !slices.Equal(acc, acc2) {
				t.Fatalf("CRLF line endings change the import: %v", err)
			}
		}
	})
}

// FuzzInspect: whatever the bytes and whatever the format, Inspect never
// panics, and every problem it reports names the file.
func FuzzInspect(f *testing.F) {
	f.Add(byte(0), []byte("pages 3\nW 0 5ns\nX\nR 0b1\n"))
	f.Add(byte(1), []byte("I  1,1\n L 2,x\n S 3000,8\n"))
	f.Add(byte(2), encode(f, Header{PageSize: 4096}, sample()))
	f.Fuzz(func(t *testing.T, kind byte, data []byte) {
		ext := []string{".memtxt", ".lackey", ".memtrace", ""}[kind%4]
		info, err := Inspect("f"+ext, bytes.NewReader(data), InspectOptions{Reuse: true, MaxProblems: 5})
		if err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(line, "f") && !strings.HasPrefix(line, "…") {
					t.Fatalf("problem %q does not name the file", line)
				}
			}
			return
		}
		var n uint64
		for _, b := range info.Reuse.Buckets {
			n += b
		}
		if n+info.Reuse.Cold != info.Stats.Accesses {
			t.Fatalf("reuse histogram counts %d accesses of %d", n+info.Reuse.Cold, info.Stats.Accesses)
		}
	})
}
