package memtrace

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tracebed/tracebed/internal/cputime"
)

// readIn drains src with reads of n accesses at a time.
func readIn(t *testing.T, src Source, n int) []Access {
	t.Helper()
	var out []Access
	buf := make([]Access, n)
	for {
		k, err := src.Read(buf)
		out = append(out, buf[:k]...)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestStreamingReadSizes(t *testing.T) {
	lackey, err := io.ReadAll(&SyntheticLackey{Size: 200 << 10, Pages: 64, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	if err := WriteText(&text, Header{PageSize: 4096, Pages: 1 << 56}, sample()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"x.lackey", lackey},
		{"x.memtxt", text.Bytes()},
		{"x.memtrace", encode(t, Header{PageSize: 4096}, sample())},
	} {
		_, whole, err := Open(tc.name, tc.data)
		if err != nil {
			t.Fatal(err)
		}
		want := readIn(t, whole, 4096)
		if len(want) == 0 {
			t.Fatalf("%s: no accesses", tc.name)
		}
		for _, n := range []int{1, 2, 3, 1000} {
			_, src, err := OpenReader(tc.name, bytes.NewReader(tc.data))
			if err != nil {
				t.Fatal(err)
			}
			if got := readIn(t, src, n); !slices.Equal(got, want) {
				t.Errorf("%s: reading %d at a time gives %d accesses, want the %d of one read", tc.name, n, len(got), len(want))
			}
		}
	}
}

// TestLackeyWideAccess: an access of 1 MiB touches 256 pages of 4 KiB, one
// page access each, whatever the reader's buffer.
func TestLackeyWideAccess(t *testing.T) {
	in := "I  00400000,4\n S 10000800,1048576\nI  00400004,4\n L 10000000,8\n"
	for _, n := range []int{1, 7, 512} {
		l, err := NewLackeyReader("w.lackey", strings.NewReader(in), LackeyOptions{PageSize: 4096, KeepAddresses: true})
		if err != nil {
			t.Fatal(err)
		}
		acc := readIn(t, l, n)
		if len(acc) != 258 {
			t.Fatalf("buffer %d: %d accesses, want 257 pages written then page 0x10000 read", n, len(acc))
		}
		for i, a := range acc[:257] {
			if a.Page != 0x10000+uint64(i) || !a.Write {
				t.Fatalf("buffer %d: access %d is %+v", n, i, a)
			}
		}
		if last := acc[257]; last.Page != 0x10000 || last.Write {
			t.Errorf("buffer %d: last access %+v, want a read of page 0x10000", n, last)
		}
	}
}

func TestInspectReportsEveryProblem(t *testing.T) {
	text := "W 1\nX 2\nR 0b1\nR 3 fast\nW 4\n"
	_, err := Inspect("p.memtxt", strings.NewReader(text), InspectOptions{MaxProblems: 10})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"p.memtxt:2: \"X\"", "p.memtxt:3: page \"0b1\"", "p.memtxt:4: gap \"fast\""} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	info, err := Inspect("p.memtxt", strings.NewReader(text), InspectOptions{MaxProblems: 2})
	if err == nil || !strings.Contains(err.Error(), "and 1 more problems") || strings.Contains(err.Error(), "p.memtxt:4") {
		t.Errorf("with a limit of 2: %v", err)
	}
	if info == nil || info.Stats.Accesses != 2 {
		t.Errorf("info %+v: want the 2 good accesses counted", info)
	}
	lackey := " L 1000,8\n S zz,4\n Q 1,1\n L 2000,0\n"
	_, err = Inspect("p.lackey", strings.NewReader(lackey), InspectOptions{MaxProblems: 10})
	for _, want := range []string{"p.lackey:2: address \"zz\"", "p.lackey:3: \" Q 1,1\" is not a lackey line", "p.lackey:4: size \"0\""} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
	// Without MaxProblems, the first problem stops it.
	if _, err := Inspect("p.memtxt", strings.NewReader(text), InspectOptions{}); err == nil || strings.Contains(err.Error(), "p.memtxt:3") {
		t.Errorf("without MaxProblems: %v, want the first problem only", err)
	}
}

func TestLongLine(t *testing.T) {
	in := "W 1\n" + strings.Repeat("R", maxLine+10) + "\n"
	if _, _, err := ParseText("l.memtxt", []byte(in)); err == nil || !strings.Contains(err.Error(), "l.memtxt:2: line longer than") {
		t.Errorf("error %v", err)
	}
}

// stackDistances computes reuse distances the slow way: an LRU stack.
func stackDistances(pages []uint64) (cold uint64, dist []uint64) {
	var stack []uint64
	for _, p := range pages {
		i := slices.Index(stack, p)
		if i < 0 {
			cold++
		} else {
			dist = append(dist, uint64(len(stack)-1-i))
			stack = slices.Delete(stack, i, i+1)
		}
		stack = append(stack, p)
	}
	return cold, dist
}

func TestReuseHistogramMatchesLRUStack(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		rng := rand.New(rand.NewPCG(seed, 9))
		span := uint64(1) << (3 + 3*seed) // 64 to 32768 pages
		n := 20000
		pages := make([]uint64, n)
		for i := range pages {
			switch rng.IntN(3) {
			case 0:
				pages[i] = uint64(i) % span // sequential
			case 1:
				pages[i] = rng.Uint64N(span)
			default:
				pages[i] = rng.Uint64N(8) // hot
			}
			pages[i] *= 1 << (seed * 10) // sparse numbers too
		}
		cold, dist := stackDistances(pages)
		want := &ReuseHistogram{Cold: cold}
		for _, d := range dist {
			want.add(d)
		}
		got := &ReuseHistogram{}
		rt := newReuseTracker()
		for _, p := range pages {
			rt.access(p, got)
		}
		if got.Cold != want.Cold || !slices.Equal(got.Buckets, want.Buckets) {
			t.Errorf("seed %d: histogram %+v, want %+v", seed, got, want)
		}
	}
}

func TestPageSet(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	var s pageSet
	m := map[uint64]bool{}
	for range 100000 {
		p := rng.Uint64N(1 << 20)
		if rng.IntN(4) == 0 {
			p = rng.Uint64() >> 8
		}
		if s.add(p) == m[p] {
			t.Fatalf("add(%d) disagrees with a map", p)
		}
		m[p] = true
	}
	if s.n != uint64(len(m)) {
		t.Errorf("%d pages, want %d", s.n, len(m))
	}
}

func TestBinaryV1StillReads(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "sample-v1.memtrace"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewReader("v1.memtrace", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	acc, err := ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if r.Version() != 1 || r.Header() != (Header{PageSize: 4096, Pages: 1 << 56}) || !slices.Equal(acc, sample()) {
		t.Errorf("version %d header %+v: the version-1 file no longer decodes to the sample", r.Version(), r.Header())
	}
	// Version 1 has no header checksum: a flipped page-size byte goes
	// unnoticed (which is why version 2 exists).
	data[5] = 13
	r, err = NewReader("v1.memtrace", bytes.NewReader(data))
	if err != nil || r.Header().PageSize != 8192 {
		t.Errorf("a version-1 header is not checksummed, yet: %v", err)
	}
}

func TestSyntheticLackeyIsARecording(t *testing.T) {
	s := &SyntheticLackey{Size: 1 << 20, Pages: 256, Seed: 1}
	info, err := Inspect("s.lackey", s, InspectOptions{Reuse: true})
	if err != nil {
		t.Fatal(err)
	}
	if info.Format != Lackey || info.DataAccesses < 10000 || info.Lines < 2*info.DataAccesses {
		t.Errorf("%+v", info)
	}
	// The footprint: the array (256 pages) plus a few stack pages.
	if info.Stats.Pages < 256 || info.Stats.Pages > 270 || info.Stats.Writes == 0 {
		t.Errorf("stats %v", info.Stats)
	}
	again, _ := io.ReadAll(&SyntheticLackey{Size: 1 << 20, Pages: 256, Seed: 1})
	first, _ := io.ReadAll(&SyntheticLackey{Size: 1 << 20, Pages: 256, Seed: 1})
	if !bytes.Equal(first, again) || int64(len(first)) < 1<<20 {
		t.Error("the same seed gives different bytes, or too few")
	}
}

// BenchmarkLackeyImport measures the streaming lackey importer on a
// synthetic recording held in memory: data accesses (L, S, M lines) and
// bytes per second on one core. Target: 5 M accesses/s per core.
func BenchmarkLackeyImport(b *testing.B) {
	data, err := io.ReadAll(&SyntheticLackey{Size: 64 << 20, Pages: 1 << 14, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]Access, 4096)
	var accesses, lines uint64
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	cpu0 := cputime.Process()
	for range b.N {
		l, err := NewLackeyReader("bench.lackey", bytes.NewReader(data), DefaultLackeyOptions())
		if err != nil {
			b.Fatal(err)
		}
		for {
			_, err := l.Read(buf)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		accesses += l.DataAccesses()
		lines += l.Lines()
	}
	s := b.Elapsed().Seconds()
	b.ReportMetric(float64(accesses)/s/1e6, "M_accesses/s")
	b.ReportMetric(float64(lines)/s/1e6, "M_lines/s")
	if cpu := (cputime.Process() - cpu0).Seconds(); cpu > 0 {
		b.ReportMetric(float64(accesses)/cpu/1e6, "M_accesses/cpu-s")
	}
}

// BenchmarkLackeyConvert is the whole conversion to the binary form, as a
// run does it the first time it meets a lackey trace.
func BenchmarkLackeyConvert(b *testing.B) {
	data, err := io.ReadAll(&SyntheticLackey{Size: 64 << 20, Pages: 1 << 14, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	var accesses uint64
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	cpu0 := cputime.Process()
	for range b.N {
		res, err := Convert(io.Discard, "bench.lackey", bytes.NewReader(data), DefaultLackeyOptions())
		if err != nil {
			b.Fatal(err)
		}
		accesses += res.DataAccesses
	}
	b.ReportMetric(float64(accesses)/b.Elapsed().Seconds()/1e6, "M_accesses/s")
	if cpu := (cputime.Process() - cpu0).Seconds(); cpu > 0 {
		b.ReportMetric(float64(accesses)/cpu/1e6, "M_accesses/cpu-s")
	}
}

// BenchmarkBinaryDecode measures decoding the binary form (what replay
// reads), in page accesses per second.
func BenchmarkBinaryDecode(b *testing.B) {
	var enc bytes.Buffer
	if _, err := Convert(&enc, "bench.lackey", &SyntheticLackey{Size: 32 << 20, Pages: 1 << 14, Seed: 1}, DefaultLackeyOptions()); err != nil {
		b.Fatal(err)
	}
	data := enc.Bytes()
	buf := make([]Access, 1024)
	var n uint64
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for range b.N {
		r, err := NewReader("bench", bytes.NewReader(data))
		if err != nil {
			b.Fatal(err)
		}
		for {
			k, err := r.Read(buf)
			n += uint64(k)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds()/1e6, "M_accesses/s")
}

func ExampleInspect() {
	trace := "pages 4\nW 0 10ns\nW 1 10ns\nR 0 10ns\nR 2 10ns\nR 1 10ns\n"
	info, err := Inspect("ex.memtxt", strings.NewReader(trace), InspectOptions{Reuse: true})
	if err != nil {
		panic(err)
	}
	fmt.Println(info.Stats)
	fmt.Println("cold", info.Reuse.Cold, "by distance", info.Reuse.Buckets)
	// Output:
	// 5 accesses (2 writes) to 3 pages, 50ns of compute
	// cold 3 by distance [0 1 1]
}
