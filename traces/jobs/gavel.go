package jobtrace

import (
	"bufio"
	"bytes"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tracebed/tracebed/internal/problems"
	"github.com/tracebed/tracebed/traces/models"
)

// Gavel's trace format (stanford-futuredata/gavel, scheduler/traces/):
// tab-separated, one job a line. Three layouts exist, told apart by their
// number of fields:
//
//	7 (2019, the Philly traces):  job_type  command  num_steps_arg  needs_data_dir  total_steps  arrival_time  scale_factor
//	9:                            job_type  command  num_steps_arg  needs_data_dir  total_steps  scale_factor  priority_weight  SLO  arrival_time
//	10:                           job_type  command  working_directory  num_steps_arg  needs_data_dir  total_steps  scale_factor  priority_weight  SLO  arrival_time
//
// job_type is one of Gavel's 26 job types ("ResNet-50 (batch size 64)"),
// total_steps the job's length in its training steps, arrival_time seconds
// since the start of the trace and scale_factor its GPUs. The command,
// flags, priority and SLO are checked for presence and ignored.
//
// A job becomes a Job as follows (docs/dynaina.md, "Philly jobs"):
//
//   - workers: scale_factor (one GPU per worker host);
//   - arrival: arrival_time;
//   - model: the tracebed profile of the job type's family (GavelModels);
//   - iterations: the job's run time on one V100 — total_steps divided by
//     the type's V100 throughput as Gavel measured it (GavelThroughputs),
//     which for the Philly traces recovers Philly's own run time — divided
//     by the profile's compute time per iteration, so that the job computes
//     for as long as it ran.

// GavelFamily is a family of Gavel job types (the type without its batch
// size) and the tracebed model that stands for it.
type GavelFamily struct {
	// Family is Gavel's name: "ResNet-18", "LM", …
	Family string
	// What Gavel trains, and our estimate of its parameters.
	Workload string
	Params   float64
	// Model is the tracebed profile (traces/models) of the nearest
	// gradient size.
	Model string
}

// GavelModels maps Gavel's job families to tracebed's model profiles: the
// profile whose gradient (bytes all-reduced per iteration, what INA
// aggregates) is nearest, by ratio, to that of the model Gavel trains,
// estimated from Gavel's workload code (workloads/pytorch). The table is
// documented, with the arithmetic, in docs/dynaina.md.
var GavelModels = []GavelFamily{
	{"ResNet-18", "ResNet-18 on CIFAR-10", 11.2e6, "inception3"},
	{"ResNet-50", "ResNet-50 on ImageNet", 25.6e6, "resnet50"},
	{"Transformer", "Transformer, 6+6 layers of width 512, on Multi30k", 50e6, "alexnet"},
	{"LM", "2-layer LSTM language model, 200 units, on WikiText-2", 14.0e6, "inception3"},
	{"Recommendation", "autoencoder recommender (200 hidden units) on MovieLens-20M", 8.0e6, "googlenet"},
	{"A3C", "A3C with an LSTM policy on Atari Pong", 3.3e6, "googlenet"},
	{"CycleGAN", "CycleGAN (two ResNet-9 generators, two PatchGAN discriminators) on monet2photo", 28.3e6, "resnet101"},
}

// GavelThroughputs are Gavel's measured training throughputs on one V100,
// in steps per second, by job type: ["v100"][type]["null"] of
// scheduler/oracle_throughputs.json at commit 6fb30f9 (September 2019), the
// commit that last regenerated the Philly traces (copied by hand; a test
// compares them with ../shared/traces/philly when it is there). Gavel derived
// each job's total_steps as its Philly run time times this throughput.
var GavelThroughputs = map[string]float64{
	"ResNet-18 (batch size 16)":        77.31737353972872,
	"ResNet-18 (batch size 32)":        65.80540708735272,
	"ResNet-18 (batch size 64)":        48.88418054077558,
	"ResNet-18 (batch size 128)":       30.287504836881368,
	"ResNet-18 (batch size 256)":       16.98737109878475,
	"ResNet-50 (batch size 16)":        17.37438936466519,
	"ResNet-50 (batch size 32)":        9.920583420101398,
	"ResNet-50 (batch size 64)":        5.4575999796347645,
	"ResNet-50 (batch size 128)":       2.8459812117650305,
	"Transformer (batch size 16)":      12.845652425203205,
	"Transformer (batch size 32)":      12.475277737306772,
	"Transformer (batch size 64)":      9.568023720783357,
	"Transformer (batch size 128)":     5.771210833383417,
	"Transformer (batch size 256)":     1.707029875260509,
	"A3C":                              8.233033211429207,
	"LM (batch size 5)":                167.12285773375763,
	"LM (batch size 10)":               143.3605131584025,
	"LM (batch size 20)":               107.9508715706423,
	"LM (batch size 40)":               71.72303675816012,
	"LM (batch size 80)":               43.90361072741378,
	"Recommendation (batch size 512)":  0.33148208257478157,
	"Recommendation (batch size 1024)": 0.47997973329981225,
	"Recommendation (batch size 2048)": 0.5675318418131742,
	"Recommendation (batch size 4096)": 0.6244083613498694,
	"Recommendation (batch size 8192)": 0.6023546957515021,
	"CycleGAN":                         4.918494739402234,
}

// gavelFamily returns the family of a job type: the type without its
// " (batch size N)".
func gavelFamily(jobType string) string {
	if i := strings.Index(jobType, " (batch size "); i >= 0 {
		return jobType[:i]
	}
	return jobType
}

// IsGavel reports whether data looks like a Gavel trace: its first line
// has 7, 9 or 10 tab-separated fields.
func IsGavel(data []byte) bool {
	line, _, _ := bytes.Cut(data, []byte("\n"))
	n := bytes.Count(line, []byte("\t")) + 1
	return n == 7 || n == 9 || n == 10
}

// gavelLayout gives the positions of the fields tracebed reads in a layout
// of n fields.
func gavelLayout(n int) (steps, arrival, gpus, flag int, ok bool) {
	switch n {
	case 7:
		return 4, 5, 6, 3, true
	case 9:
		return 4, 8, 5, 3, true
	case 10:
		return 5, 9, 6, 4, true
	}
	return 0, 0, 0, 0, false
}

// ParseGavel imports a trace in Gavel's format (see above). Every problem
// is reported with its line and field (job_type, total_steps,
// arrival_time, scale_factor). Jobs get ids in file order.
func ParseGavel(file string, data []byte) ([]Job, error) {
	return ParseGavelCompressed(file, data, 1)
}

// ParseGavelCompressed imports a Gavel trace compressed in time by a factor
// (see Compress), before iterations are rounded: a job of Philly's
// longest, 24 days, needs more than MaxIterations iterations of the
// fastest profile uncompressed.
func ParseGavelCompressed(file string, data []byte, factor float64) ([]Job, error) {
	if !(factor >= 1) || math.IsInf(factor, 0) {
		return nil, errorf(file, 0, "", "time compression %v: want a factor of 1 or more", factor)
	}
	var jobs []Job
	var probs problems.List
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	line, layout := 0, 0
	for sc.Scan() {
		line++
		text := strings.TrimRight(sc.Text(), "\r")
		if strings.TrimSpace(text) == "" || strings.HasPrefix(text, "#") {
			continue
		}
		f := strings.Split(text, "\t")
		if layout == 0 {
			layout = len(f)
		}
		steps, arrival, gpus, flag, ok := gavelLayout(len(f))
		if !ok || len(f) != layout {
			probs.Add(errorf(file, line, "", "%d tab-separated fields; a Gavel trace has 7, 9 or 10 (and the same number on every line: the first has %d)", len(f), layout))
			continue
		}
		j := Job{ID: len(jobs), Line: line}
		good := true
		bad := func(field, format string, args ...any) {
			probs.Add(errorf(file, line, field, format, args...))
			good = false
		}
		jobType := f[0]
		tput, known := GavelThroughputs[jobType]
		prof, mapped := gavelProfile(jobType)
		if !known || !mapped {
			bad("job_type", "%q is not one of Gavel's job types (%s)", truncate(jobType), strings.Join(gavelTypes(), ", "))
		}
		if f[flag] != "0" && f[flag] != "1" {
			bad("needs_data_dir", "%q; want 0 or 1", truncate(f[flag]))
		}
		n, err := strconv.ParseInt(strings.TrimSpace(f[steps]), 10, 64)
		if err != nil || n < 1 {
			bad("total_steps", "%q; want a whole number of steps, at least 1", truncate(f[steps]))
		}
		if j.Arrival, err = parseArrival(f[arrival]); err != nil {
			bad("arrival_time", "%v", err)
		}
		if j.Workers, err = parseCount(f[gpus], "GPUs", 1, MaxWorkers); err != nil {
			bad("scale_factor", "%v", err)
		}
		if !good {
			continue
		}
		j.Model = prof.Name
		j.Arrival = time.Duration(math.Round(float64(j.Arrival) / factor))
		runtime := float64(n) / tput // seconds on one V100
		iters := math.Round(runtime / factor / prof.Compute.Seconds())
		if iters > MaxIterations {
			bad("total_steps", "%d steps of %s (%.0f h on a V100) are %.0f iterations of %s, above %d: compress the trace in time by %.0f or more (time_compression in a spec; --time-compression of tracebed trace convert, trace info and validate)",
				n, jobType, runtime/3600, iters, prof.Name, MaxIterations, math.Ceil(iters/MaxIterations*factor))
			continue
		}
		j.Iterations = max(1, int(iters))
		jobs = append(jobs, j)
	}
	if err := sc.Err(); err != nil {
		probs.Add(errorf(file, line+1, "", "%v (lines are limited to 1 MiB)", err))
	}
	return check(file, jobs, &probs)
}

// gavelProfile returns the tracebed profile of a Gavel job type.
func gavelProfile(jobType string) (models.Profile, bool) {
	fam := gavelFamily(jobType)
	for _, g := range GavelModels {
		if g.Family == fam {
			return models.Lookup(g.Model)
		}
	}
	return models.Profile{}, false
}

func gavelTypes() []string {
	var names []string
	for _, g := range GavelModels {
		names = append(names, g.Family+" (batch size N)")
	}
	sort.Strings(names)
	return names
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// GavelRunTime returns the run time on one V100 of a Gavel job of a type
// and length, as Gavel computes it (total_steps ÷ throughput).
func GavelRunTime(jobType string, totalSteps int64) (time.Duration, bool) {
	t, ok := GavelThroughputs[jobType]
	if !ok || t <= 0 {
		return 0, false
	}
	return time.Duration(float64(totalSteps) / t * 1e9), true
}

// The copy of a Philly virtual cluster's jobs in Gavel's format, and the
// time compression the ready spec dynaina-philly replays it with (see
// README.md in this directory).
const (
	PhillyTrace       = "philly-e13805.trace"
	PhillyCompression = 1000
)
