package labs

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tracebed/tracebed/analysis"
	"github.com/tracebed/tracebed/emulator/netns"
)

// testPrefix starts the run ids of this test binary (see netns.RunTests).
var testPrefix = "lx" + netns.NewRunID()[:1]

// tracebedBin is the tracebed binary the tests run, built by TestMain: the
// labs are checked with the commands their handouts give.
var tracebedBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tracebed-labs")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tracebedBin = filepath.Join(dir, "tracebed")
	if out, err := exec.Command("go", "build", "-o", tracebedBin, "../cmd/tracebed").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building tracebed: %v\n%s", err, out)
		os.Exit(1)
	}
	code := netns.RunTests(m, testPrefix)
	os.RemoveAll(dir)
	os.Exit(code)
}

// tracebed runs the binary from the repository's root, as the handouts do.
func tracebed(t *testing.T, args ...string) string {
	t.Helper()
	c := exec.Command(tracebedBin, args...)
	c.Dir = ".."
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("tracebed %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func needRoot(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("skipping: this part of the lab needs Linux (network namespaces)")
	}
	if os.Geteuid() != 0 {
		t.Skip("skipping: this part of the lab needs root (network namespaces)")
	}
}

// TestHandouts checks that every lab has its handout and its answers, and
// that every file a handout names exists.
func TestHandouts(t *testing.T) {
	dirs, err := filepath.Glob("[0-9]-*")
	if err != nil || len(dirs) != 4 {
		t.Fatalf("labs: %v, %v", dirs, err)
	}
	paths := regexp.MustCompile("(?:^|[\\s(`])((?:labs|wireshark|docs|experiments)/[A-Za-z0-9_./-]+\\.(?:yaml|md|lua))")
	for _, d := range dirs {
		for _, f := range []string{"README.md", "ANSWERS.md"} {
			data, err := os.ReadFile(filepath.Join(d, f))
			if err != nil {
				t.Errorf("lab %s: %v", d, err)
				continue
			}
			found := paths.FindAllStringSubmatch(string(data), -1)
			if f == "README.md" && len(found) == 0 {
				t.Errorf("%s/%s names no file of the repository", d, f)
			}
			for _, m := range found {
				p := m[1]
				if _, err := os.Stat(filepath.Join("..", p)); err != nil {
					t.Errorf("%s/%s names %s: %v", d, f, p, err)
				}
			}
		}
	}
}

func results(t *testing.T, dir, experiment string) *analysis.Results {
	t.Helper()
	res, err := analysis.Read(filepath.Join(dir, experiment, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// metric returns a run's metric (mean over seeds).
func metric(res *analysis.Results, scenario, policy, name string) float64 {
	return res.Aggregate(scenario, policy)[name].Mean
}

// TestLab4 checks the observations of labs/4-noisy-neighbour/README.md.
func TestLab4(t *testing.T) {
	out := t.TempDir()
	tracebed(t, "run", "labs/4-noisy-neighbour/noisy-neighbour.yaml", "--out", out, "--quiet", "--plots=false")
	res := results(t, out, "lab4-noisy-neighbour")
	m := func(sc, p, name string) float64 { return metric(res, sc, p, name) }
	for _, sc := range []string{"quiet", "neighbour-50", "neighbour-75"} {
		for _, p := range []string{"fastswap", "glitter"} {
			if e := m(sc, p, "integrity_errors"); e != 0 {
				t.Errorf("%s %s: %v integrity errors", sc, p, e)
			}
		}
	}
	// Without the neighbour the two perform the same.
	if r := m("quiet", "glitter", "throughput_ops") / m("quiet", "fastswap", "throughput_ops"); r < 0.97 || r > 1.03 {
		t.Errorf("quiet: Glitter's throughput is %.2f× Fastswap's, want about 1", r)
	}
	// About as many blocking events in every scenario.
	for _, p := range []string{"fastswap", "glitter"} {
		q := m("quiet", p, "blocking_events")
		for _, sc := range []string{"neighbour-50", "neighbour-75"} {
			if r := m(sc, p, "blocking_events") / q; r < 0.8 || r > 1.25 {
				t.Errorf("%s: %s has %.2f× the blocking events of the quiet run, want about as many", sc, p, r)
			}
		}
	}
	// Fastswap's blocking time grows with the neighbour's load (about 2×
	// at 50%, 3× at 75%); Glitter's stays.
	fq, f50, f75 := m("quiet", "fastswap", "blocking_time_s"), m("neighbour-50", "fastswap", "blocking_time_s"), m("neighbour-75", "fastswap", "blocking_time_s")
	if !(f50 > 1.5*fq && f75 > 2.2*fq && f75 > f50) {
		t.Errorf("Fastswap's blocking time %.4f, %.4f, %.4f s: want it to grow with the load, about 2× and 3×", fq, f50, f75)
	}
	gq := m("quiet", "glitter", "blocking_time_s")
	for _, sc := range []string{"neighbour-50", "neighbour-75"} {
		if g := m(sc, "glitter", "blocking_time_s"); g > 1.2*gq {
			t.Errorf("%s: Glitter's blocking time %.4f s, quiet %.4f s: want about the same", sc, g, gq)
		}
	}
	// Fastswap's tail fault latency grows several-fold; Glitter's hardly.
	if r := m("neighbour-75", "fastswap", "fault_p99_us") / m("quiet", "fastswap", "fault_p99_us"); r < 3 {
		t.Errorf("Fastswap's p99 fault latency grows %.1f× at 75%%, want several-fold", r)
	}
	if r := m("neighbour-75", "glitter", "fault_p99_us") / m("quiet", "glitter", "fault_p99_us"); r > 1.5 {
		t.Errorf("Glitter's p99 fault latency grows %.1f× at 75%%, want hardly", r)
	}
	// Glitter keeps its throughput, about 2× Fastswap's at 75%.
	if r := m("neighbour-75", "glitter", "throughput_ops") / m("quiet", "glitter", "throughput_ops"); r < 0.9 {
		t.Errorf("Glitter keeps %.2f of its quiet throughput at 75%%", r)
	}
	if r := m("neighbour-75", "glitter", "throughput_ops") / m("neighbour-75", "fastswap", "throughput_ops"); r < 1.7 || r > 2.5 {
		t.Errorf("at 75%%, Glitter's throughput is %.2f× Fastswap's, want about 2×", r)
	}
}

// TestLab3 checks the first observation of
// labs/3-your-own-policy/README.md, with the policy systems/mine as
// shipped: it beats no INA significantly when memory suffices, equals
// SwitchML here, and DynaINA's paired reduction against it is small and
// not significant.
func TestLab3(t *testing.T) {
	out := t.TempDir()
	tracebed(t, "run", "labs/3-your-own-policy/your-policy.yaml", "--out", out, "--quiet", "--plots=false")
	res := results(t, out, "lab3-your-policy")
	for _, sc := range []string{"mem-512", "mem-2048", "mem-8192"} {
		if m, s := metric(res, sc, "mine", "avg_jct_s"), metric(res, sc, "switchml", "avg_jct_s"); m != s {
			t.Errorf("%s: mine's average JCT %.3f s, SwitchML's %.3f s: want the same", sc, m, s)
		}
		// DynaINA's reduction against mine: small, not significant.
		if p := res.PairedRelative(sc, "avg_jct_s", "dynaina", "mine"); p.N() != 3 || math.Abs(p.Mean) > 5 || p.Significant() {
			t.Errorf("%s: DynaINA's reduction against mine %+.2f%% [%+.2f, %+.2f]: want small and not significant", sc, p.Mean, p.Lo, p.Hi)
		}
	}
	for _, sc := range []string{"mem-2048", "mem-8192"} {
		if p := res.PairedRelative(sc, "avg_jct_s", "mine", "noina"); !p.Significant() || p.Mean < 10 {
			t.Errorf("%s: mine's reduction against no INA %+.2f%% [%+.2f, %+.2f]: want significant", sc, p.Mean, p.Lo, p.Hi)
		}
	}
}

// TestLab2 checks the observations of labs/2-switch-memory/README.md:
// part B on the simulation; part A, as root, on the network of lab2.yaml.
func TestLab2(t *testing.T) {
	t.Run("B", func(t *testing.T) {
		out := t.TempDir()
		tracebed(t, "run", "labs/2-switch-memory/memory-sweep.yaml", "--out", out, "--quiet", "--plots=false")
		res := results(t, out, "lab2-memory-sweep")
		jct := func(sc, p string) float64 { return metric(res, sc, p, "avg_jct_s") }
		mems := []string{"mem-0", "mem-128", "mem-512", "mem-2048", "mem-8192"}
		for _, sc := range mems[1:] {
			if jct(sc, "noina") != jct("mem-0", "noina") {
				t.Errorf("%s: noina's average JCT %.3f s differs from mem-0's %.3f s", sc, jct(sc, "noina"), jct("mem-0", "noina"))
			}
		}
		for _, p := range []string{"switchml", "dynaina"} {
			for _, sc := range []string{"mem-2048", "mem-8192"} {
				if g := 1 - jct(sc, p)/jct(sc, "noina"); g < 0.10 {
					t.Errorf("%s: %s is %.1f%% faster than noina, want more than 10%%", sc, p, 100*g)
				}
			}
			if big, small := jct("mem-2048", p)-jct("mem-8192", p), jct("mem-512", p)-jct("mem-2048", p); big >= small {
				t.Errorf("%s: 2048→8192 aggregators gains %.2f s, 512→2048 %.2f s: want diminishing returns", p, big, small)
			}
			frac := 0.0
			for _, sc := range mems {
				f := metric(res, sc, p, "ina_fraction")
				if f < frac {
					t.Errorf("%s: ina_fraction falls to %.3f at %s", p, f, sc)
				}
				frac = f
			}
			if frac != 1 {
				t.Errorf("%s: ina_fraction %.3f at 8192 aggregators, want 1", p, frac)
			}
			if u1, u2 := metric(res, "mem-2048", p, "mem_util"), metric(res, "mem-8192", p, "mem_util"); u2 >= u1 {
				t.Errorf("%s: mem_util %.3f at 2048, %.3f at 8192: want it to fall", p, u1, u2)
			}
		}
		// 128 aggregators are too few to beat the ring: no policy uses them.
		for _, p := range []string{"switchml", "dynaina"} {
			if f := metric(res, "mem-128", p, "ina_fraction"); f != 0 || jct("mem-128", p) != jct("mem-128", "noina") {
				t.Errorf("128 aggregators: %s aggregates %.3f of its bytes in the switch, average JCT %.2f s (noina %.2f s): want the ring", p, f, jct("mem-128", p), jct("mem-128", "noina"))
			}
		}
	})
	t.Run("A", func(t *testing.T) {
		needRoot(t)
		id := netns.TestRunID(testPrefix)
		defer removeRun(id)
		tracebed(t, "topo", "up", "labs/2-switch-memory/lab2.yaml", "--program", "ina", "--detach", "--run-id", id)
		defer tracebed(t, "topo", "down", "--run", id)
		// Real time on a shared machine: each pool's time is the least of
		// up to three rounds, taken in turn, so that a moment of load
		// (make test runs packages side by side) slows one measurement,
		// not the comparison. The rounds stop once the times are as the
		// lab says.
		times := map[int]time.Duration{}
		re := regexp.MustCompile(`all-reduce time ([0-9.]+[µm]?s)`)
		var problems []string
		for round := 1; round <= 3; round++ {
			for _, p := range []int{2, 8, 32, 128} {
				out := tracebed(t, "topo", "allreduce", "--run", id, "--hosts", "h1,h2", "--elements", "65536", "--pool", strconv.Itoa(p))
				mm := re.FindStringSubmatch(out)
				if mm == nil || !strings.Contains(out, "every sum exact") {
					t.Fatalf("pool %d:\n%s", p, out)
				}
				d, err := time.ParseDuration(mm[1])
				if err != nil {
					t.Fatal(err)
				}
				if old, ok := times[p]; !ok || d < old {
					times[p] = d
				}
				t.Logf("round %d, pool %3d: %v", round, p, d)
			}
			if problems = lab2Times(times); len(problems) == 0 {
				return
			}
		}
		for _, p := range problems {
			t.Error(p)
		}
	})
}

// lab2Times checks lab 2's all-reduce times by pool size (the least of
// each) against what its README says, and returns what disagrees.
func lab2Times(times map[int]time.Duration) []string {
	var problems []string
	// Latency-bound: a pool of 8 about four times faster than 2.
	if r := float64(times[2]) / float64(times[8]); r < 2.5 {
		problems = append(problems, fmt.Sprintf("pool 2 → 8 cuts the time %.1f×, want about 4×", r))
	}
	// Bandwidth-bound: 1024 frames of 322 bytes at 10 Mbit/s take
	// 264 ms; a pool four times larger gains little.
	link := time.Duration(1024 * 322 * 8 * float64(time.Second) / 10e6)
	if times[128] < link*9/10 {
		problems = append(problems, fmt.Sprintf("pool 128: %v, faster than the link allows (%v)", times[128], link))
	}
	if r := float64(times[32]) / float64(times[128]); r > 1.6 {
		problems = append(problems, fmt.Sprintf("pool 32 → 128 cuts the time %.1f×: the link should be (nearly) full", r))
	}
	return problems
}

// TestLab1 follows labs/1-watch-an-aggregate/README.md as root: two
// captures of the switch while four workers all-reduce 128 values, decoded
// with tshark and the dissector, and the switch's counters.
func TestLab1(t *testing.T) {
	needRoot(t)
	if _, err := exec.LookPath("tshark"); err != nil {
		t.Skip("skipping: tshark is not installed (apt-get install tshark)")
	}
	id := netns.TestRunID(testPrefix)
	defer removeRun(id)
	tracebed(t, "topo", "up", "labs/1-watch-an-aggregate/lab1.yaml", "--program", "ina", "--detach", "--run-id", id)
	defer tracebed(t, "topo", "down", "--run", id)
	dir := t.TempDir()
	var caps []*exec.Cmd
	for _, port := range []string{"1", "2"} {
		c := exec.Command(tracebedBin, "topo", "capture", "tor:"+port, "-w", filepath.Join(dir, "h"+port+".pcapng"), "--run", id, "--duration", "20s")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		caps = append(caps, c)
	}
	time.Sleep(500 * time.Millisecond)
	out := tracebed(t, "topo", "allreduce", "--run", id, "--hosts", "h1,h2,h3,h4", "--elements", "128")
	if !strings.Contains(out, "every sum exact") || !strings.Contains(out, "10000 = 1000 + … + 4000") {
		t.Errorf("topo allreduce:\n%s", out)
	}
	script := filepath.Join(dir, "counters.txt")
	os.WriteFile(script, []byte("counters tor\n"), 0o644)
	counters := tracebed(t, "topo", "cli", "--run", id, "--script", script)
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`InaIngress.job_aggregated\[1\] +8 `), // 4 workers × 2 chunks
		regexp.MustCompile(`InaIngress.job_results\[1\] +[2-9] `),
		regexp.MustCompile(`InaIngress.job_packets\[1\] +([89]|[1-9][0-9]) `),
	} {
		if !want.MatchString(counters) {
			t.Errorf("counters tor: want %s:\n%s", want, counters)
		}
	}
	for _, c := range caps {
		c.Process.Signal(os.Interrupt)
		c.Wait()
	}
	type pkt struct {
		src, dst, flags, worker, offset, bitmap, values string
	}
	decode := func(file string) []pkt {
		c := exec.Command("tshark", "-X", "lua_script:../wireshark/tracebed.lua", "-r", file, "-Y", "ina", "-T", "fields",
			"-e", "ip.src", "-e", "ip.dst", "-e", "ina.flags", "-e", "ina.worker", "-e", "ina.offset", "-e", "ina.bitmap", "-e", "ina.value")
		c.Env = append(os.Environ(), "HOME="+dir)
		data, err := c.Output()
		if err != nil {
			t.Fatalf("tshark %s: %v", file, err)
		}
		var ps []pkt
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			f := strings.Split(sc.Text(), "\t")
			if len(f) == 7 {
				ps = append(ps, pkt{f[0], f[1], f[2], f[3], f[4], f[5], f[6]})
			}
		}
		return ps
	}
	values := func(first, step int) string {
		var v []string
		for i := range 64 {
			v = append(v, strconv.Itoa(first+step*i))
		}
		return strings.Join(v, ",")
	}
	for _, tc := range []struct {
		file, host string
		worker     int
	}{{"h1.pcapng", "10.0.0.1", 0}, {"h2.pcapng", "10.0.0.2", 1}} {
		ps := decode(filepath.Join(dir, tc.file))
		for _, offset := range []int{0, 64} {
			var data, result bool
			for _, p := range ps {
				if p.offset != strconv.Itoa(offset) {
					continue
				}
				switch {
				case p.src == tc.host && p.dst == "10.255.0.1" && (p.flags == "0x01" || p.flags == "0x05"): // data, retransmitted or not
					data = true
					if p.worker != strconv.Itoa(tc.worker) || p.bitmap != fmt.Sprintf("0x%08x", 1<<tc.worker) ||
						p.values != values(1000*(tc.worker+1)+offset, 1) {
						t.Errorf("%s: contribution %+v", tc.file, p)
					}
				case p.src == "10.255.0.1" && p.dst == tc.host && p.flags == "0x02":
					result = true
					if p.bitmap != "0x0000000f" || p.values != values(10000+4*offset, 4) {
						t.Errorf("%s: aggregate %+v", tc.file, p)
					}
				}
			}
			if !data || !result {
				t.Errorf("%s, chunk at offset %d: contribution seen %v, aggregate seen %v (%d INA packets)", tc.file, offset, data, result, len(ps))
			}
		}
	}
}
