package training

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/tracebed/tracebed/analysis"
	"github.com/tracebed/tracebed/emulator/testbed"
	"github.com/tracebed/tracebed/experiments"
	"github.com/tracebed/tracebed/internal/units"
	dp "github.com/tracebed/tracebed/p4/freeina"
	jobtrace "github.com/tracebed/tracebed/traces/jobs"
	"github.com/tracebed/tracebed/traces/models"
	freepkt "github.com/tracebed/tracebed/workloads/freeina"
	"github.com/tracebed/tracebed/workloads/training/fabric"
	"github.com/tracebed/tracebed/workloads/training/flow"
	"github.com/tracebed/tracebed/workloads/training/packet"
)

// FreeINA in the ina kind (docs/freeina.md §7): a spec that names a policy
// of system freeina gets two more metrics and, with ATP beside it, a table
// of FreeINA against ATP with the paper's numbers. Specs without FreeINA
// keep their metrics and tables as they were.

// Metric names of specs with FreeINA.
const (
	// MetricAggGbps is the aggregation throughput: the sum over the
	// distributed jobs of the rate at which each aggregates its workers'
	// gradients while it all-reduces (workers × gradient bits ÷ time
	// all-reducing), Gbps.
	MetricAggGbps = "agg_gbps"
	// MetricPSShare is the share of all-reduces not aggregated in a
	// switch: FreeINA's parameter-server path, the host ring of others.
	MetricPSShare = "ps_share"
	// MetricRecovered and MetricRecoveredChunks count, in FreeINA's
	// packet-level runs, the all-reduces whose chunks failed on the INA
	// path (sums overflowed, connections that gave up) and that the hosts
	// finished on the PS path, and those chunks (docs/freeina.md §4);
	// MetricGaveUp the INA connections whose retries ran out.
	MetricRecovered       = "recovered"
	MetricRecoveredChunks = "recovered_chunks"
	MetricGaveUp          = "gave_up"
)

// The FreeINA paper's headline numbers (seeds/001, second paragraph).
const (
	paperSpeedup    = 1.20 // single-job training speedup over ATP
	paperThroughput = 2.65 // aggregation throughput over ATP, multiple jobs
)

// hasFreeINA reports whether a policy of the spec runs FreeINA.
func (e *experiment) hasFreeINA() bool {
	return e.policyOf("freeina") != ""
}

// policyOf returns the first policy of the spec (in spec order) that runs
// system, or "".
func (e *experiment) policyOf(system string) string {
	for _, name := range e.order {
		if e.systems[name] == system {
			return name
		}
	}
	return ""
}

// freeinaMetrics are the metrics a spec with FreeINA adds.
func (e *experiment) freeinaMetrics() []analysis.MetricInfo {
	if !e.hasFreeINA() {
		return nil
	}
	ms := []analysis.MetricInfo{
		{Name: MetricAggGbps, Unit: "Gbps", Better: analysis.Higher, Description: "aggregation throughput: Σ over distributed jobs of workers × gradient bits ÷ time all-reducing"},
		{Name: MetricPSShare, Better: analysis.Lower, Description: "share of all-reduces not aggregated in a switch (FreeINA's PS path, the host ring of others)"},
	}
	if !e.hasPacket() {
		return ms // the flow model has neither loss nor values: nothing fails on INA
	}
	return append(ms,
		analysis.MetricInfo{Name: MetricRecovered, Better: analysis.Lower, Description: "FreeINA (packets): all-reduces whose chunks failed on INA (overflowed sums, connections that gave up), finished on the PS path"},
		analysis.MetricInfo{Name: MetricRecoveredChunks, Better: analysis.Lower, Description: "FreeINA (packets): chunks re-aggregated on the PS path after they failed on INA"},
		analysis.MetricInfo{Name: MetricGaveUp, Better: analysis.Lower, Description: "FreeINA (packets): INA connections whose retries ran out (retry count exceeded), re-established"})
}

// hasPacket reports whether a scenario of the spec runs with packets.
func (e *experiment) hasPacket() bool {
	for _, sc := range e.scenarios {
		if sc.p.Granularity == GranularityPacket {
			return true
		}
	}
	return false
}

// reportFreeINA adds the FreeINA metrics of a run's jobs when the spec has
// FreeINA.
func (e *experiment) reportFreeINA(run *analysis.Run, jobs []flow.JobResult) {
	if !e.hasFreeINA() {
		return
	}
	gbps, share := aggregation(jobs)
	run.Metrics[MetricAggGbps] = gbps
	run.Metrics[MetricPSShare] = share
}

// aggregation returns the aggregation throughput of jobs (Gbps) and the
// share of their all-reduces that no switch aggregated.
func aggregation(jobs []flow.JobResult) (gbps, psShare float64) {
	var ina, other int
	for _, j := range jobs {
		if j.Workers < 2 {
			continue
		}
		if t := j.INATime + j.RingTime; t > 0 {
			gbps += float64(j.Workers) * j.Gradient * 8 / t / 1e9
		}
		ina += j.INARounds
		other += j.RingRounds
	}
	if ina+other > 0 {
		psShare = float64(other) / float64(ina+other)
	}
	return gbps, psShare
}

// runFreePacket runs FreeINA with packets (package workloads/freeina): RDMA
// hosts on the scaled topology, p4/freeina on its switches, the policy's
// memory per all-reduce through P4Runtime. Every all-reduced sum is
// checked exact and the RC contract at every host (the run fails
// otherwise). Results are in paper units, as runPacket's.
func (e *experiment) runFreePacket(ctx context.Context, r experiments.Run, sc *scenario, js []jobtrace.Job) (*analysis.Run, error) {
	newTB := r.NewTestbed
	if newTB == nil {
		newTB = experiments.SimTestbed
	}
	prog, err := dp.SwitchProgram()
	if err != nil {
		return nil, err
	}
	tb, err := newTB(ctx, sc.testbedConfig(&prog, r.Seed))
	if err != nil {
		return nil, err
	}
	defer tb.Close()
	s, err := e.freeSetup(sc, r.Policy, tb, js, r.Seed)
	if err != nil {
		return nil, err
	}
	s.Progress = r.Progress
	o, err := freepkt.Run(ctx, s)
	if err != nil {
		return nil, fmt.Errorf("FreeINA with packets: %w", err)
	}
	if err := tb.Close(); err != nil {
		return nil, fmt.Errorf("closing the %s testbed: %w", tb.Substrate(), err)
	}
	run := e.reportPacket(&o.Outcome, sc)
	run.Metrics[MetricRecovered] = float64(o.Recovered)
	run.Metrics[MetricRecoveredChunks] = float64(o.RecoveredChunks)
	run.Metrics[MetricGaveUp] = float64(o.GaveUp)
	if sc.p.FreeINAOverflow != 0 {
		run.Params["freeina_overflow"] = float64(sc.p.FreeINAOverflow)
	}
	return run, nil
}

// freeSetup is the packet-level run of FreeINA policy policy on a
// scenario's scaled network, built as tb.
func (e *experiment) freeSetup(sc *scenario, policy string, tb testbed.Testbed, js []jobtrace.Job, seed int64) (freepkt.Setup, error) {
	f, err := e.factory(policy, sc.scaledScenario())
	if err != nil {
		return freepkt.Setup{}, err
	}
	scaled := sc.scaled
	return freepkt.Setup{
		Testbed: sc.hostModel(tb, uint64(seed)), Workers: scaled.Workers, Controller: scaled.Controller, PS: scaled.PS,
		Net: scaled.Net, Jobs: js, Lookup: packet.ScaleProfiles(models.Lookup, scaled.Factor),
		Policy: f, Seed: uint64(seed), Timeout: freeTimeout(sc), Message: freeMessage(sc), Bins: sc.p.Bins,
		Overflow: float64(sc.p.FreeINAOverflow),
	}, nil
}

// freeMessage is the PS path's message bytes on a packet-level run: what
// lets every worker of the largest job have one message in flight within
// half the smallest buffer (its incast at the parameter server's link),
// in whole 4 KiB packets, 4 KiB to 64 KiB (workloads/freeina's default).
// On the scaled networks, whose buffers shrink with the line-rate
// windows, 64 KiB messages from every worker at once would overflow the
// parameter server's link on every retransmission alike.
func freeMessage(sc *scenario) int {
	buf := units.Bytes(math.MaxInt64)
	for _, l := range sc.scaled.Top.Links {
		buf = min(buf, l.Buffer)
	}
	m := int(buf) / 2 / sc.maxWorkers()
	m -= m % fabric.PSMTU
	return min(64<<10, max(fabric.PSMTU, m))
}

// freeTimeout is the RC local ACK timeout of FreeINA's hosts on a scaled
// run: the spec's timeout if set, else twice the time to drain the
// fullest buffer of the scaled network and a PS-path message at the
// slowest host's rate (an acknowledgement may wait behind both), at
// least 1 ms, the RNIC's unscaled default, which on the 10 Mbps links
// of a 1:10000 run a 4 KiB packet alone nearly takes.
func freeTimeout(sc *scenario) time.Duration {
	if sc.p.Timeout > 0 {
		return time.Duration(sc.p.Timeout)
	}
	var buf units.Bytes
	for _, l := range sc.scaled.Top.Links {
		buf = max(buf, l.Buffer)
	}
	rate := float64(minAccessRate(sc.scaled.Top))
	return max(time.Millisecond, fabric.Secs(2*float64(int64(buf)+int64(freeMessage(sc)))*8/rate))
}

// distributed is the number of distributed jobs of a scenario's replayed
// job list, or its generated jobs' count.
func (s *scenario) distributed() int {
	if s.jobs == nil {
		return s.p.Jobs
	}
	n := 0
	for _, j := range s.jobs {
		if j.Workers > 1 {
			n++
		}
	}
	return n
}

// summarizeFreeINA is the table of FreeINA against ATP: per scenario the
// training speedup (ATP's mean JCT ÷ FreeINA's) and the aggregation
// throughput ratio (FreeINA's agg_gbps ÷ ATP's), beside the paper's
// numbers where the scenario is the paper's setting (one job: 1.20×
// training speedup; 2 to 16 jobs: 2.65× aggregation throughput), then
// their geometric means over those scenarios.
func (e *experiment) summarizeFreeINA(res *analysis.Results) []analysis.Table {
	f, a := e.policyOf("freeina"), e.policyOf("atp")
	if f == "" || a == "" {
		return nil
	}
	t := analysis.Table{
		Title: fmt.Sprintf("%s — %s against %s (the FreeINA paper: %.2f× single-job training speedup, %.2f× aggregation throughput with multiple jobs)", res.Experiment, f, a, paperSpeedup, paperThroughput),
		Header: []string{"scenario", "jobs", "training speedup", "paper", "aggregation throughput", "paper",
			a + " agg_gbps", f + " agg_gbps", f + " ps_share"},
	}
	ratio := func(x float64) string {
		if math.IsNaN(x) || math.IsInf(x, 0) || x <= 0 {
			return "n/a"
		}
		return fmt.Sprintf("%.2f×", x)
	}
	var single, multi []float64
	for _, sc := range res.Scenarios {
		fa, aa := res.Aggregate(sc, f), res.Aggregate(sc, a)
		if len(fa) == 0 || len(aa) == 0 {
			continue
		}
		n := 0
		if s := e.scenarios[sc]; s != nil {
			n = s.distributed()
		}
		speed := aa[MetricAvgJCT].Mean / fa[MetricAvgJCT].Mean
		thr := fa[MetricAggGbps].Mean / aa[MetricAggGbps].Mean
		ps, pt := "", ""
		switch {
		case n == 1:
			ps = fmt.Sprintf("%.2f×", paperSpeedup)
			single = append(single, speed)
		case n >= 2 && n <= 16:
			pt = fmt.Sprintf("%.2f×", paperThroughput)
			multi = append(multi, thr)
		}
		t.Rows = append(t.Rows, []string{sc, fmt.Sprint(n), ratio(speed), ps, ratio(thr), pt,
			fmt.Sprintf("%.1f", aa[MetricAggGbps].Mean), fmt.Sprintf("%.1f", fa[MetricAggGbps].Mean), fmt.Sprintf("%.3f", fa[MetricPSShare].Mean)})
	}
	if len(single) > 0 {
		t.Rows = append(t.Rows, []string{"single job (geometric mean)", "1", ratio(geomean(single)), fmt.Sprintf("%.2f×", paperSpeedup), "", "", "", "", ""})
	}
	if len(multi) > 0 {
		t.Rows = append(t.Rows, []string{"2–16 jobs (geometric mean)", "", "", "", ratio(geomean(multi)), fmt.Sprintf("%.2f×", paperThroughput), "", "", ""})
	}
	t.Notes = append(t.Notes,
		"Training speedup: "+a+" avg_jct_s ÷ "+f+" avg_jct_s, means over seeds (the same jobs ran under both). Aggregation throughput: "+f+" agg_gbps ÷ "+a+" agg_gbps; agg_gbps sums over the jobs their workers × gradient bits ÷ their time all-reducing.",
		"ps_share: the share of FreeINA's all-reduces that the hosts sent on the parameter-server path (memory not granted, or the INA path slower). docs/freeina.md §7 explains how these setups follow the paper's and why the numbers differ.")
	if e.hasPacket() {
		t.Notes = append(t.Notes, "With packets, ps_share counts too the all-reduces whose chunks failed on INA (sums overflowed, connections that gave up) and that the hosts finished on the parameter-server path: recovered (docs/freeina.md §4).")
	}
	return []analysis.Table{t}
}

// geomean is the geometric mean of positive values (NaN if one is not).
func geomean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		if !(x > 0) {
			return math.NaN()
		}
		s += math.Log(x)
	}
	return math.Exp(s / float64(len(xs)))
}
