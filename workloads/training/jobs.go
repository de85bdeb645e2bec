package training

import (
	"strconv"
	"strings"

	"github.com/tracebed/tracebed/analysis"
	"github.com/tracebed/tracebed/workloads/training/flow"
)

// TableJobs is the name of the per-job table of an INA run (jobs.csv).
const TableJobs = "jobs"

// jobColumns are the columns of the per-job table, in paper units. A job's
// times add up: jct_s = queue_s + compute_s + mem_wait_s + ina_s + ring_s.
var jobColumns = []analysis.MetricInfo{
	{Name: "workers", Description: "workers, one a host"},
	{Name: "iterations", Description: "iterations: compute, then an all-reduce of the gradient"},
	{Name: "arrival_s", Unit: "s", Description: "arrival, from the start of the trace"},
	{Name: "start_s", Unit: "s", Description: "start on its hosts"},
	{Name: "finish_s", Unit: "s", Description: "end of its last iteration"},
	{Name: "jct_s", Unit: "s", Better: analysis.Lower, Description: "job completion time: finish − arrival"},
	{Name: "queue_s", Unit: "s", Better: analysis.Lower, Description: "queueing for hosts: start − arrival"},
	{Name: "compute_s", Unit: "s", Description: "computing (the slowest worker's time, every iteration)"},
	{Name: "mem_wait_s", Unit: "s", Better: analysis.Lower, Description: "waiting for switch memory: every worker done computing, the job's pool held by another member or being handed over"},
	{Name: "ina_s", Unit: "s", Description: "all-reducing in a switch (its pool, or ATP's shared pool with its parameter server)"},
	{Name: "ring_s", Unit: "s", Description: "all-reducing on the host ring"},
	{Name: "ina_rounds", Description: "all-reduces in a switch"},
	{Name: "ring_rounds", Description: "all-reduces on the host ring"},
	{Name: "ina_fraction", Better: analysis.Higher, Description: "share of the job's gradient bytes aggregated in a switch (distributed jobs)"},
	{Name: "fallback_bytes", Unit: "B", Better: analysis.Lower, Description: "gradient bytes its workers sent to a parameter server after collisions"},
	{Name: "bound_s", Unit: "s", Description: "isolated lower bound: every iteration's compute plus, for a distributed job, the gradient's bits over its workers' link rate"},
	{Name: "slowdown", Better: analysis.Lower, Description: "jct_s ÷ bound_s: how much longer than alone on an ideal network"},
}

// jobTable is the per-job breakdown of a run's jobs: a row per job, in
// trace order, labelled with its model and the switches it aggregated on
// (the top of its tree first, then the racks' switches below it; none if
// it never all-reduced in a switch).
func jobTable(jobs []flow.JobResult) analysis.EntityTable {
	t := analysis.EntityTable{Name: TableJobs, Entity: "job", Labels: []string{"model", "switches"}, Columns: jobColumns}
	for _, j := range jobs {
		row := analysis.EntityRow{
			ID:     strconv.Itoa(j.ID),
			Labels: map[string]string{"model": j.Model},
			Values: map[string]float64{
				"workers": float64(j.Workers), "iterations": float64(j.Iterations),
				"arrival_s": j.Arrival, "start_s": j.Start, "finish_s": j.Finish, "jct_s": j.JCT(),
				"queue_s": j.Start - j.Arrival, "compute_s": j.Compute, "mem_wait_s": j.MemWait,
				"ina_s": j.INATime, "ring_s": j.RingTime,
				"ina_rounds": float64(j.INARounds), "ring_rounds": float64(j.RingRounds),
				"fallback_bytes": j.Fallback, "bound_s": j.Bound,
			},
		}
		if j.INARounds > 0 {
			row.Labels["switches"] = strings.Join(append([]string{j.Switch}, j.Lower...), " ")
		}
		if j.Workers > 1 && j.Gradient > 0 {
			row.Values["ina_fraction"] = j.INA / j.Gradient
		}
		if j.Bound > 0 {
			row.Values["slowdown"] = j.JCT() / j.Bound
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}
