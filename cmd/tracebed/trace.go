package main

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tracebed/tracebed/analysis"
	"github.com/tracebed/tracebed/internal/units"
	jobtrace "github.com/tracebed/tracebed/traces/jobs"
	memtrace "github.com/tracebed/tracebed/traces/mem"
	"github.com/tracebed/tracebed/traces/models"
)

func (a *app) traceCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "trace",
		Short: "Convert, inspect and record traces",
		Long: `Work with the traces experiments replay: memory-access traces (binary
.memtrace, text .memtxt, valgrind lackey output .lackey) and INA job
traces (.csv, .jsonl, the Tiresias CSV, Gavel's .trace).

Far-memory runs convert text and lackey traces to the binary form once
and keep the result in a cache named by the trace's content
($TRACEBED_CACHE_DIR, else the user's cache directory); 'trace convert'
does the same conversion to a file of your choice.`,
	}
	cmd.AddCommand(a.traceConvertCommand(), a.traceInfoCommand(), a.traceRecordCommand())
	return cmd
}

// lackeyFlags are the import options of lackey output, as flags.
type lackeyFlags struct {
	pageSize units.Bytes
	nsPerIns float64
	keep     bool
}

func addLackeyFlags(f *pflag.FlagSet) *lackeyFlags {
	l := &lackeyFlags{pageSize: memtrace.DefaultPageSize}
	f.Var(bytesFlag{&l.pageSize}, "page-size", "lackey: the page size of the trace (a power of two, 512B to 1GiB)")
	f.Float64Var(&l.nsPerIns, "ns-per-instruction", memtrace.DefaultLackeyOptions().NsPerInstruction, "lackey: compute time of one recorded instruction, in nanoseconds")
	f.BoolVar(&l.keep, "keep-addresses", false, "lackey: keep page numbers as addresses ÷ page size instead of renumbering them densely")
	return l
}

func (l *lackeyFlags) options() memtrace.LackeyOptions {
	return memtrace.LackeyOptions{PageSize: int(l.pageSize), NsPerInstruction: l.nsPerIns, KeepAddresses: l.keep}
}

// bytesFlag is a pflag.Value of a size with units ("4KiB").
type bytesFlag struct{ b *units.Bytes }

func (f bytesFlag) String() string {
	if f.b == nil {
		return ""
	}
	return f.b.String()
}
func (f bytesFlag) Type() string { return "size" }
func (f bytesFlag) Set(s string) error {
	v, err := units.ParseBytes(s)
	if err != nil {
		return err
	}
	*f.b = v
	return nil
}

// traceKind says whether a file name is a job trace or a memory trace.
func traceKind(name string) string {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".csv", ".jsonl", ".ndjson", ".trace":
		return "jobs"
	case ".memtrace", ".memtxt", ".lackey":
		return "memory"
	}
	return ""
}

func (a *app) traceConvertCommand() *cobra.Command {
	var compression float64
	var lf *lackeyFlags
	cmd := &cobra.Command{
		Use:   "convert [flags] IN OUT",
		Short: "Convert a trace to another format",
		Long: `Convert IN to OUT, in the format of OUT's extension.

Memory traces: IN is binary, text or lackey output (or - for standard
input, recognised by its content), read as a stream; OUT is .memtrace
(binary, what runs replay) or .memtxt (text). A binary trace of an older
version is rewritten in the current one.

Job traces: IN is any job trace (.csv, .jsonl, a Tiresias CSV, Gavel's
.trace); OUT is .csv or .jsonl. --time-compression N divides arrivals and
iterations by N (for Gavel's traces, before iterations are rounded), so
that jobs overlap as they did in 1/N of the time.`,
		Example: "  tracebed trace convert prog.lackey prog.memtrace\n" +
			"  valgrind --tool=lackey --trace-mem=yes --log-fd=9 ./prog 9>&1 >/dev/null | tracebed trace convert - prog.memtrace\n" +
			"  tracebed trace convert --time-compression 1000 traces/jobs/philly-e13805.trace philly-x1000.csv",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			in, out := args[0], args[1]
			kind := traceKind(out)
			if k := traceKind(in); in != "-" && k != kind {
				return badInput(fmt.Errorf("%s to %s: want a memory trace (.memtrace, .memtxt, .lackey) into .memtrace or .memtxt, or a job trace (.csv, .jsonl, .trace) into .csv or .jsonl", in, out))
			}
			switch kind {
			case "memory":
				if cmd.Flags().Changed("time-compression") {
					return badInput(errors.New("--time-compression applies to job traces"))
				}
				return a.convertMemTrace(in, out, lf.options())
			case "jobs":
				return a.convertJobTrace(in, out, compression)
			}
			return badInput(fmt.Errorf("%s: unknown output format %q; want .memtrace, .memtxt, .csv or .jsonl", out, filepath.Ext(out)))
		},
	}
	f := cmd.Flags()
	f.Float64Var(&compression, "time-compression", 1, "job traces: divide arrivals and iterations by this factor")
	lf = addLackeyFlags(f)
	return cmd
}

// writeAtomically writes a file through a temporary file renamed into
// place, so that a failed conversion leaves no partial output.
func writeAtomically(path string, write func(io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := write(tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func (a *app) convertMemTrace(in, out string, opts memtrace.LackeyOptions) error {
	to := memtrace.Extensions[strings.ToLower(filepath.Ext(out))]
	if to != memtrace.Binary && to != memtrace.Text {
		return badInput(fmt.Errorf("%s: a memory trace converts to .memtrace (binary) or .memtxt (text)", out))
	}
	var r io.Reader = os.Stdin
	name := "stdin"
	if in != "-" {
		f, err := os.Open(in)
		if err != nil {
			return badInput(err)
		}
		defer f.Close()
		r, name = f, in
	}
	start := time.Now()
	var res *memtrace.ConvertResult
	err := writeAtomically(out, func(w io.Writer) (err error) {
		res, err = memtrace.ConvertTo(w, to, name, r, opts)
		return err
	})
	if err != nil {
		if memtraceInputError(err) {
			return badInput(err)
		}
		return err
	}
	fmt.Fprintf(a.stdout, "%s (%s) → %s (%s): %v\n", name, res.Format, out, to, res.Stats)
	if res.Format == memtrace.Lackey {
		fmt.Fprintf(a.stderr, "%d lackey lines, %d data accesses, in %.1fs\n", res.Lines, res.DataAccesses, time.Since(start).Seconds())
	}
	return nil
}

// memtraceInputError tells a trace's own problems (a file, a line, exit 2)
// from a failure to write the output.
func memtraceInputError(err error) bool {
	return !strings.Contains(err.Error(), "write the ")
}

func (a *app) convertJobTrace(in, out string, factor float64) error {
	if !(factor >= 1) || math.IsInf(factor, 0) {
		return badInput(fmt.Errorf("--time-compression %v: want a factor of 1 or more", factor))
	}
	data, err := readLimited(in, maxJobTrace)
	if err != nil {
		return badInput(err)
	}
	jobs, format, err := jobtrace.ParseCompressed(in, data, factor)
	if err != nil {
		return badInput(err)
	}
	comment := jobtrace.ConvertComment(filepath.Base(in), format, factor)
	err = writeAtomically(out, func(w io.Writer) error {
		switch strings.ToLower(filepath.Ext(out)) {
		case ".csv":
			return jobtrace.WriteCSV(w, jobs, comment)
		case ".jsonl", ".ndjson":
			return jobtrace.WriteJSONL(w, jobs)
		}
		return badInput(fmt.Errorf("%s: a job trace converts to .csv or .jsonl", out))
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "%s (%s) → %s: %d jobs\n", in, format, out, len(jobs))
	return nil
}

func (a *app) traceInfoCommand() *cobra.Command {
	var compression float64
	var format *formatFlag
	var lf *lackeyFlags
	cmd := &cobra.Command{
		Use:   "info [flags] FILE",
		Short: "Summarise a trace",
		Long: `Summarise FILE, read as a stream.

A memory trace: its format, page size, accesses, distinct pages and
footprint, read/write mix, compute time, and a histogram of reuse
distances (how many other pages were touched since the page's previous
access): an access at distance d hits in an LRU memory of more than d
pages, so the cumulative column is LRU's hit ratio against local memory.

A job trace: its jobs, their arrivals, workers, models and GPU time;
--time-compression N summarises it as a spec's time_compression replays
it (Gavel's Philly trace needs 2 or more).`,
		Example: "  tracebed trace info --time-compression 1000 traces/jobs/philly-e13805.trace",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := args[0]
			switch traceKind(path) {
			case "jobs":
				return a.jobTraceInfo(path, format.value, compression)
			default:
				if cmd.Flags().Changed("time-compression") {
					return badInput(errors.New("--time-compression applies to job traces"))
				}
				return a.memTraceInfo(path, format.value, lf.options())
			}
		},
	}
	cmd.Flags().Float64Var(&compression, "time-compression", 1, "job traces: divide arrivals and iterations by this factor")
	lf = addLackeyFlags(cmd.Flags())
	format = addFormatFlag(cmd.Flags(), formatTable, "output format")
	return cmd
}

func (a *app) memTraceInfo(path, format string, opts memtrace.LackeyOptions) error {
	f, err := os.Open(path)
	if err != nil {
		return badInput(err)
	}
	defer f.Close()
	info, err := memtrace.Inspect(path, f, memtrace.InspectOptions{Lackey: opts, Reuse: true, MaxProblems: maxProblems})
	if err != nil {
		return badInput(err)
	}
	st := info.Stats
	footprint := float64(st.Pages) * float64(info.Header.PageSize)
	if format == formatJSON {
		return writeJSON(a.stdout, map[string]any{
			"file": path, "format": info.Format, "version": info.Version, "page_size": info.Header.PageSize,
			"accesses": st.Accesses, "writes": st.Writes, "pages": st.Pages, "max_page": st.MaxPage,
			"footprint_bytes": footprint, "compute_s": st.Compute.Seconds(),
			"lackey_lines": info.Lines, "lackey_data_accesses": info.DataAccesses,
			"reuse": map[string]any{"cold": info.Reuse.Cold, "buckets": info.Reuse.Buckets},
		})
	}
	pct := func(n uint64) string {
		if st.Accesses == 0 {
			return "0%"
		}
		return fmt.Sprintf("%.1f%%", 100*float64(n)/float64(st.Accesses))
	}
	kind := string(info.Format)
	if info.Format == memtrace.Binary {
		kind = fmt.Sprintf("binary, version %d", info.Version)
	}
	kib := func(b float64) string { return analysis.DisplayFor("KiB", b/1024).With(b / 1024) }
	summary := analysis.Table{Title: path, Header: []string{"memory trace", ""}, Rows: [][]string{
		{"format", kind},
		{"page size", units.Bytes(info.Header.PageSize).String()},
		{"accesses", analysis.DisplayFor("", float64(st.Accesses)).With(float64(st.Accesses))},
		{"reads / writes", pct(st.Accesses-st.Writes) + " / " + pct(st.Writes)},
		{"distinct pages", analysis.DisplayFor("", float64(st.Pages)).With(float64(st.Pages))},
		{"footprint (distinct pages × page size)", kib(footprint)},
		{"compute (sum of gaps)", analysis.DisplayFor("s", st.Compute.Seconds()).With(st.Compute.Seconds())},
	}}
	if info.Format == memtrace.Lackey {
		summary.Rows = append(summary.Rows,
			[]string{"lackey lines", analysis.DisplayFor("", float64(info.Lines)).With(float64(info.Lines))},
			[]string{"lackey data accesses", analysis.DisplayFor("", float64(info.DataAccesses)).With(float64(info.DataAccesses))})
	}
	reuse := analysis.Table{
		Title:  "Reuse distance (distinct other pages touched since the page's previous access)",
		Header: []string{"distance (pages)", "accesses", "share", "LRU hit ratio with more pages than this"},
		Notes: []string{fmt.Sprintf("First touches (no previous access): %s. LRU hit ratio: the share of all accesses at this distance or less, which an LRU memory of more pages than the distance would hit.",
			pct(info.Reuse.Cold))},
	}
	var cum uint64
	for k, n := range info.Reuse.Buckets {
		if n == 0 {
			continue
		}
		cum += n
		lo, hi := memtrace.BucketRange(k)
		r := fmt.Sprint(lo)
		if hi > lo {
			r = fmt.Sprintf("%d–%d", lo, hi)
		}
		reuse.Rows = append(reuse.Rows, []string{r, analysis.DisplayFor("", float64(n)).Format(float64(n)), pct(n), pct(cum)})
	}
	return writeTables(a.stdout, format, []analysis.Table{summary, reuse})
}

func (a *app) jobTraceInfo(path, format string, compression float64) error {
	data, err := readLimited(path, maxJobTrace)
	if err != nil {
		return badInput(err)
	}
	jobs, f, err := jobtrace.ParseCompressed(path, data, compression)
	if err != nil {
		return badInput(err)
	}
	workers, modelJobs := map[int]int{}, map[string]int{}
	var iters, gpuTime float64
	for _, j := range jobs {
		workers[j.Workers]++
		modelJobs[j.Model]++
		p, _ := models.Lookup(j.Model)
		iters += float64(j.Iterations)
		gpuTime += float64(j.Iterations) * p.Compute.Seconds() * float64(j.Workers)
	}
	span := jobs[len(jobs)-1].Arrival - jobs[0].Arrival
	if format == formatJSON {
		return writeJSON(a.stdout, map[string]any{
			"file": path, "format": f, "jobs": len(jobs), "arrival_span_s": span.Seconds(),
			"iterations": iters, "gpu_time_s": gpuTime, "workers": workers, "models": modelJobs,
		})
	}
	summary := analysis.Table{Title: path, Header: []string{"job trace", ""}, Rows: [][]string{
		{"format", string(f)},
		{"jobs", fmt.Sprint(len(jobs))},
		{"arrivals over", analysis.DisplayFor("s", span.Seconds()).With(span.Seconds())},
		{"iterations", analysis.DisplayFor("", iters).With(iters)},
		{"GPU time (compute alone, " + models.ReferenceGPU + ")", analysis.DisplayFor("s", gpuTime).With(gpuTime)},
	}}
	mix := analysis.Table{Title: "Jobs by workers and by model", Header: []string{"workers", "jobs", "model", "jobs"}}
	ws := slices.Sorted(func(yield func(int) bool) {
		for w := range workers {
			if !yield(w) {
				return
			}
		}
	})
	ms := make([]string, 0, len(modelJobs))
	for m := range modelJobs {
		ms = append(ms, m)
	}
	slices.SortFunc(ms, func(x, y string) int { return cmp.Or(modelJobs[y]-modelJobs[x], strings.Compare(x, y)) })
	for i := range max(len(ws), len(ms)) {
		row := []string{"", "", "", ""}
		if i < len(ws) {
			row[0], row[1] = fmt.Sprint(ws[i]), fmt.Sprint(workers[ws[i]])
		}
		if i < len(ms) {
			row[2], row[3] = ms[i], fmt.Sprint(modelJobs[ms[i]])
		}
		mix.Rows = append(mix.Rows, row)
	}
	return writeTables(a.stdout, format, []analysis.Table{summary, mix})
}

func (a *app) traceRecordCommand() *cobra.Command {
	var out string
	var lf *lackeyFlags
	cmd := &cobra.Command{
		Use:   "record [flags] -- PROG [ARG...]",
		Short: "Record a program's memory accesses with valgrind and convert them",
		Long: `Run PROG under valgrind's lackey tool (valgrind --tool=lackey
--trace-mem=yes) and convert what it records, as it runs, into a binary
memory trace: nothing of lackey's text, which runs to gigabytes, is kept.
PROG's standard input, output and error are this command's; valgrind's log
goes to file descriptor 3 of PROG's process, which PROG must leave alone.

Replay the result with app: trace, trace: OUT in a far-memory spec.`,
		Example: "  tracebed trace record --out sort.memtrace -- sort -S 64M big.txt -o /dev/null",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			valgrind, err := exec.LookPath("valgrind")
			if err != nil {
				return badInput(errors.New("trace record needs valgrind, which is not installed (apt-get install valgrind, brew install valgrind)"))
			}
			if out == "" {
				out = filepath.Base(args[0]) + ".memtrace"
			}
			if memtrace.Extensions[strings.ToLower(filepath.Ext(out))] != memtrace.Binary {
				return badInput(fmt.Errorf("--out %s: want a .memtrace file", out))
			}
			return a.record(cmd, valgrind, out, args, lf.options())
		},
	}
	cmd.Flags().StringVarP(&out, "out", "o", "", "the binary trace to write (default: PROG.memtrace in the working directory)")
	lf = addLackeyFlags(cmd.Flags())
	return cmd
}

// record runs args under valgrind lackey with its log on a pipe, and
// converts the log into out as it comes.
func (a *app) record(cmd *cobra.Command, valgrind, out string, args []string, opts memtrace.LackeyOptions) error {
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	defer pr.Close()
	c := exec.CommandContext(cmd.Context(), valgrind, append([]string{"--tool=lackey", "--trace-mem=yes", "--log-fd=3"}, args...)...)
	c.Stdin, c.Stdout = os.Stdin, a.stdout
	var stderr bytes.Buffer
	c.Stderr = io.MultiWriter(a.stderr, &limitedBuffer{b: &stderr, max: 4096})
	c.ExtraFiles = []*os.File{pw} // fd 3 in the child
	start := time.Now()
	if err := c.Start(); err != nil {
		pw.Close()
		return fmt.Errorf("start valgrind: %w", err)
	}
	pw.Close() // the child holds the write end now
	var res *memtrace.ConvertResult
	convErr := writeAtomically(out, func(w io.Writer) (err error) {
		res, err = memtrace.Convert(w, args[0]+" (lackey)", pr, opts)
		if err != nil {
			// Let valgrind finish (or notice) rather than block on a
			// full pipe, then report.
			io.Copy(io.Discard, pr)
		}
		return err
	})
	waitErr := c.Wait()
	if convErr != nil {
		if waitErr != nil {
			return badInput(fmt.Errorf("valgrind %s: %v (%s); nothing was recorded", args[0], waitErr, strings.TrimSpace(stderr.String())))
		}
		return convErr
	}
	fmt.Fprintf(a.stdout, "%s: %v (from %d lackey lines, %d data accesses, in %.1fs)\n", out, res.Stats, res.Lines, res.DataAccesses, time.Since(start).Seconds())
	var ee *exec.ExitError
	if errors.As(waitErr, &ee) {
		return fmt.Errorf("%s exited with status %d; %s holds what it did until then", args[0], ee.ExitCode(), out)
	}
	return waitErr
}

// limitedBuffer keeps the first max bytes written to it.
type limitedBuffer struct {
	b   *bytes.Buffer
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.max - l.b.Len(); room > 0 {
		l.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
