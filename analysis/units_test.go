package analysis

import (
	"strings"
	"testing"
)

func TestDisplayFor(t *testing.T) {
	for _, tc := range []struct {
		unit   string
		values []float64
		want   string // v[0] shown with its unit
		header string // of metric "m_" + unit... (name below)
		name   string
	}{
		{"B", []float64{3646201963311.7, 1908657617622.0}, "3.646 TB", "fallback_bytes (TB)", "fallback_bytes"},
		{"B", []float64{0}, "0 B", "fallback_bytes (B)", "fallback_bytes"},
		{"s", []float64{0.0123, 0.5}, "12.30 ms", "blocking_time_s (ms)", "blocking_time_s"},
		{"s", []float64{1234.5678}, "1235 s", "avg_jct_s", "avg_jct_s"},
		{"s", []float64{98765.4}, "98,765 s", "makespan_s", "makespan_s"},
		{"us", []float64{12.5, 900}, "12.50 µs", "fault_p99_us", "fault_p99_us"},
		{"us", []float64{2500}, "2500 µs", "fault_p99_us", "fault_p99_us"},
		{"us", []float64{25000}, "25.00 ms", "fault_p99_us (ms)", "fault_p99_us"},
		{"ops/s", []float64{682223}, "682.2 k ops/s", "throughput_ops (k ops/s)", "throughput_ops"},
		{"ops/s", []float64{12}, "12 ops/s", "rate (ops/s)", "rate"},
		{"Gbps", []float64{0.25, 0.5}, "250 Mbps", "background_gbps (Mbps)", "background_gbps"},
		{"KiB", []float64{2048}, "2048 KiB", "max_queue_kib", "max_queue_kib"},
		{"KiB", []float64{20480}, "20 MiB", "max_queue_kib (MiB)", "max_queue_kib"},
		{"Gbps", []float64{98.59}, "98.59 Gbps", "background_gbps", "background_gbps"},
		{"pages", []float64{1234567}, "1,234,567 pages", "evicted_pages", "evicted_pages"},
		{"", []float64{0.9312}, "0.9312", "mem_util", "mem_util"},
		{"", []float64{123456}, "123,456", "faults", "faults"},
	} {
		d := DisplayFor(tc.unit, tc.values...)
		if got := d.With(tc.values[0]); got != tc.want {
			t.Errorf("%s %v: %q, want %q", tc.unit, tc.values, got, tc.want)
		}
		if got := d.Header(tc.name); got != tc.header {
			t.Errorf("%s %v: header %q, want %q", tc.unit, tc.values, got, tc.header)
		}
	}
}

// TestComparisonKeepsExactCSV: the terminal shows human units, the CSV form
// the exact numbers.
func TestComparisonKeepsExactCSV(t *testing.T) {
	r := &Results{
		Schema: Schema, Experiment: "x", Substrate: "sim", Seeds: []int64{1, 2}, Policies: []string{"a"}, Scenarios: []string{"s"},
		Metrics: []MetricInfo{{Name: "fallback_bytes", Unit: "B", Better: Lower}},
		Runs: []Run{
			{Policy: "a", Scenario: "s", Seed: 1, Metrics: Metrics{"fallback_bytes": 1737544345689.7}},
			{Policy: "a", Scenario: "s", Seed: 2, Metrics: Metrics{"fallback_bytes": 5554859580933.7}},
		},
	}
	tab := r.Comparison()[0]
	if tab.Header[1] != "fallback_bytes (TB)" || tab.Rows[0][1] != "3.646 ± 2.699" {
		t.Errorf("table %q %q", tab.Header, tab.Rows)
	}
	var b strings.Builder
	if err := WriteCSV(&b, []Table{tab}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "fallback_bytes,fallback_bytes_std") || !strings.Contains(b.String(), ",3646201963311.7") {
		t.Errorf("csv:\n%s", b.String())
	}
}
