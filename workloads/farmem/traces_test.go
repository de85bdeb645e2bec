package farmem

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tracebed/tracebed/analysis"
)

// scanTrace is a text trace: passes sequential passes over pages pages,
// written on the first pass, with gap ns of compute before each access.
func scanTrace(pages, passes, gap int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "pages %d\n", pages)
	for pass := range passes {
		op := "R"
		if pass == 0 {
			op = "W"
		}
		for p := range pages {
			fmt.Fprintf(&b, "%s %d %dns\n", op, p, gap)
		}
	}
	return b.String()
}

func writeTraces(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// hostRow returns the per-host row of host in the run of scenario/policy.
func hostRow(t *testing.T, res *analysis.Results, scenario, policy, host string) analysis.EntityRow {
	t.Helper()
	for _, r := range res.Runs {
		if r.Scenario != scenario || r.Policy != policy {
			continue
		}
		tab := r.Table(TableHosts)
		if tab == nil {
			t.Fatalf("%s/%s: no %s table", scenario, policy, TableHosts)
		}
		for _, row := range tab.Rows {
			if row.ID == host {
				return row
			}
		}
	}
	t.Fatalf("%s/%s: no row for %s", scenario, policy, host)
	return analysis.EntityRow{}
}

// TestOneTracePerHost gives each paging host its own trace, by list and by
// pattern, next to the spec: the per-host table shows each host replaying
// its own file.
func TestOneTracePerHost(t *testing.T) {
	dir := writeTraces(t, map[string]string{
		"small.memtxt": scanTrace(40, 3, 200),
		"large.memtxt": scanTrace(120, 2, 100),
	})
	spec := `kind: farmem
topology: {generate: star, hosts: 3, rate: 100Gbps, delay: 1us, buffer: 256KiB, queues: 8}
workload: {roles: {hosts: [h1, h2], servers: [h3]}, app: trace, local_memory: 0.5}
policies: [fastswap]
scenarios:
  - {name: list, traces: [small.memtxt, large.memtxt]}
  - {name: pattern, trace: "*.memtxt"}
  - {name: one, trace: small.memtxt}
  - {name: mixed, apps: [trace, stream], memory_scale: 2048, traces: [large.memtxt]}
`
	path := filepath.Join(dir, "spec.yaml")
	if err := os.WriteFile(path, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	res, _ := executeFile(t, path)
	for _, tc := range []struct {
		scenario, host, trace string
		accesses, pages       float64
	}{
		{"list", "h1", "small.memtxt", 120, 40},
		{"list", "h2", "large.memtxt", 240, 120},
		{"pattern", "h1", "large.memtxt", 240, 120}, // sorted: large before small
		{"pattern", "h2", "small.memtxt", 120, 40},
		{"one", "h1", "small.memtxt", 120, 40},
		{"one", "h2", "small.memtxt", 120, 40},
		{"mixed", "h1", "large.memtxt", 240, 120},
	} {
		row := hostRow(t, res, tc.scenario, "fastswap", tc.host)
		if row.Labels["trace"] != tc.trace || row.Values["accesses"] != tc.accesses || row.Values["working_set"] != tc.pages {
			t.Errorf("%s/%s: trace %q, %v accesses, %v pages; want %s, %v, %v", tc.scenario, tc.host,
				row.Labels["trace"], row.Values["accesses"], row.Values["working_set"], tc.trace, tc.accesses, tc.pages)
		}
	}
	if row := hostRow(t, res, "mixed", "fastswap", "h2"); row.Labels["app"] != "stream" || row.Labels["trace"] != "" {
		t.Errorf("mixed/h2: %v", row.Labels)
	}
}

// TestHostBreakdown checks the per-host table against the run's metrics
// and against itself: accesses split into hits, first touches, faults and
// rescues; completion into compute, blocking and fault waits (on sim,
// nothing else).
func TestHostBreakdown(t *testing.T) {
	res, _ := execute(t, small)
	for _, r := range res.Runs {
		tab := r.Table(TableHosts)
		if tab == nil || len(tab.Rows) != 2 {
			t.Fatalf("%s/%s: host table %+v", r.Scenario, r.Policy, tab)
		}
		var faults, blocks, completion float64
		for _, row := range tab.Rows {
			v := row.Values
			if got := v["hits"] + v["first_touches"] + v["faults"] + v["rescues"]; got != v["accesses"] {
				t.Errorf("%s/%s/%s: hits + first touches + faults + rescues = %v, accesses %v", r.Scenario, r.Policy, row.ID, got, v["accesses"])
			}
			parts := v["compute_s"] + v["blocked_s"] + v["fault_wait_s"]
			if math.Abs(v["other_s"]) > 1e-9 || math.Abs(parts+v["other_s"]-v["completion_s"]) > 1e-9 {
				t.Errorf("%s/%s/%s: completion %v = compute %v + blocked %v + fault wait %v + other %v", r.Scenario, r.Policy, row.ID,
					v["completion_s"], v["compute_s"], v["blocked_s"], v["fault_wait_s"], v["other_s"])
			}
			if v["local_memory"] <= 0 || v["local_memory"] > v["working_set"] && r.Scenario != "fits" {
				t.Errorf("%s/%s/%s: local memory %v of %v pages", r.Scenario, r.Policy, row.ID, v["local_memory"], v["working_set"])
			}
			faults += v["faults"]
			blocks += v["blocks"]
			completion = max(completion, v["completion_s"])
		}
		if faults != r.Metrics[MetricFaults] || blocks != r.Metrics[MetricBlocks] || completion != r.Metrics[MetricCompletion] {
			t.Errorf("%s/%s: hosts add up to %v faults, %v blocks, %v s; the run says %v, %v, %v", r.Scenario, r.Policy,
				faults, blocks, completion, r.Metrics[MetricFaults], r.Metrics[MetricBlocks], r.Metrics[MetricCompletion])
		}
	}
	csv, err := res.EntityCSV(TableHosts)
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(string(csv), "\n"); lines != 1+2*len(res.Runs) {
		t.Errorf("hosts.csv has %d lines for %d runs of 2 hosts", lines, len(res.Runs))
	}
}

// TestTraceLimits: what validates must run. A trace whose gaps add up to
// more than a run may take, or a scale at which the run's clock would
// overflow, is refused with the field named, before anything runs.
func TestTraceLimits(t *testing.T) {
	dir := writeTraces(t, map[string]string{
		"hours.memtxt":  "W 0 1h\nW 1 1h\nR 0 1h\n",
		"ok.memtxt":     scanTrace(8, 2, 100),
		"bad.memtxt":    "W 0\nW 0b101\nR x\n",
		"sparse.memtxt": "W 0\nW 0x10000000\n",
		"empty.memtxt":  "# no accesses\npages 4\n",
	})
	for _, tc := range []struct{ name, yaml, want string }{
		{"gaps", "workload: {app: trace, trace: hours.memtxt}\n", "spec.yaml:3:31: workload.trace: " + filepath.Join(dir, "hours.memtxt") + ": its gaps add up to 3h0m0s of compute, beyond the run limit of 16m40s"},
		{"scale", "scale: 1e5\nworkload: {app: trace, trace: ok.memtxt}\n", "spec.yaml:3:8: scale: 100000: a far-memory run may take 16m40s"},
		{"scale beyond any kind", "scale: 1e30\nworkload: {app: trace, trace: ok.memtxt}\n", "spec.yaml:3:8: scale: 1e+30; the scale factor divides rates"},
		{"every line", "workload: {app: trace, trace: bad.memtxt}\n", "bad.memtxt:2: page \"0b101\""},
		{"no accesses", "workload: {app: trace, trace: empty.memtxt}\n", "spec.yaml:3:31: workload.trace: " + filepath.Join(dir, "empty.memtxt") + ": no accesses"},
		{"sparse", "workload: {app: trace, trace: sparse.memtxt}\n", "renumber the pages densely"},
		{"too many traces", "workload: {app: trace, traces: [ok.memtxt, ok.memtxt, ok.memtxt, ok.memtxt, ok.memtxt]}\n", "workload.traces: 5 trace files for 4 hosts"},
		{"traces without app", "workload: {traces: [ok.memtxt]}\n", "workload.traces: 1 traces, but no host replays one"},
		{"trace without app", "workload: {trace: ok.memtxt}\n", "workload.trace: ok.memtxt, but no scenario replays a trace"},
		{"a scenario's trace without app", "scenarios: [{name: a, app: trace, trace: ok.memtxt}, {name: b, trace: ok.memtxt}]\n", "scenarios[1].trace: ok.memtxt, but no host of this scenario replays"},
		{"no match", "workload: {app: trace, trace: '*.lackey'}\n", "pattern \"*.lackey\" matches no file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "spec.yaml")
			if err := os.WriteFile(path, []byte("kind: farmem\npolicies: [fastswap]\n"+tc.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			_, _, err := compileFile(t, path)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v\nwant one containing %q", err, tc.want)
			}
		})
	}
}

// TestCompileReportsEveryScenario: problems in several scenarios and
// policies are all reported.
func TestCompileReportsEveryScenario(t *testing.T) {
	_, _, err := compile(t, "bad.yaml", `kind: farmem
policies: [fastswap, {name: x, host: hermit, network: fifo}]
scenarios:
  - {name: a, local_memory: 0}
  - {name: b, app: sort}
  - {name: c, replacement: fifo}
`)
	for _, want := range []string{"scenarios[0].local_memory", "scenarios[1].app", "scenarios[2].replacement", "policies[1].host"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %s", err, want)
		}
	}
}

// TestLackeyTraceUsesScenarioPageSize: a lackey recording is imported with
// the scenario's page size, not a fixed 4 KiB.
func TestLackeyTraceUsesScenarioPageSize(t *testing.T) {
	var b strings.Builder
	for i := range 64 {
		fmt.Fprintf(&b, "I  00400000,4\n S %08x,8\n", 0x10000000+i*2048)
	}
	dir := writeTraces(t, map[string]string{"p.lackey": b.String()})
	path := filepath.Join(dir, "spec.yaml")
	for _, tc := range []struct {
		pageSize string
		pages    float64
	}{{"4KiB", 32}, {"8KiB", 16}} {
		spec := "kind: farmem\ntopology: {generate: star, hosts: 2, rate: 100Gbps, delay: 1us, buffer: 256KiB, queues: 8}\n" +
			"workload: {roles: {hosts: [h1], servers: [h2]}, app: trace, trace: p.lackey, page_size: " + tc.pageSize + "}\npolicies: [fastswap]\n"
		if err := os.WriteFile(path, []byte(spec), 0o644); err != nil {
			t.Fatal(err)
		}
		res, _ := executeFile(t, path)
		if row := hostRow(t, res, "default", "fastswap", "h1"); row.Values["working_set"] != tc.pages {
			t.Errorf("page size %s: working set %v pages, want %v", tc.pageSize, row.Values["working_set"], tc.pages)
		}
	}
}
