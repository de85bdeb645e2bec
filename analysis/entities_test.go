package analysis

import (
	"strings"
	"testing"
)

func hostTable(blocked float64) EntityTable {
	return EntityTable{
		Name: "hosts", Entity: "host", Labels: []string{"app"},
		Columns: []MetricInfo{
			{Name: "completion_s", Unit: "s", Better: Lower},
			{Name: "blocked_s", Unit: "s", Better: Lower},
			{Name: "evictions", Unit: "pages"},
		},
		Rows: []EntityRow{
			{ID: "h1", Labels: map[string]string{"app": "memcached"}, Values: map[string]float64{"completion_s": 1.5, "blocked_s": blocked, "evictions": 123456}},
			{ID: "h2", Labels: map[string]string{"app": "trace"}, Values: map[string]float64{"completion_s": 0.25}},
		},
	}
}

func TestEntityTablesRoundTrip(t *testing.T) {
	r := &Results{
		Schema: Schema, Experiment: "fm", Substrate: "sim", Seeds: []int64{1}, Policies: []string{"a", "b"}, Scenarios: []string{"s"},
		Metrics: []MetricInfo{{Name: "m"}},
		Runs: []Run{
			{Policy: "a", Scenario: "s", Seed: 1, Metrics: Metrics{"m": 1}, Tables: []EntityTable{hostTable(0.0125)}},
			{Policy: "b", Scenario: "s", Seed: 1, Metrics: Metrics{"m": 2}, Tables: []EntityTable{hostTable(0.5)}},
		},
	}
	data, err := r.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse("r.json", data)
	if err != nil {
		t.Fatal(err)
	}
	if names := back.EntityTables(); len(names) != 1 || names[0] != "hosts" {
		t.Fatalf("tables %v", names)
	}
	csv, err := back.EntityCSV("hosts")
	if err != nil {
		t.Fatal(err)
	}
	want := "experiment,scenario,policy,seed,host,app,completion_s,blocked_s,evictions [pages]\n" +
		"fm,s,a,1,h1,memcached,1.5,0.0125,123456\n" +
		"fm,s,a,1,h2,trace,0.25,,\n" +
		"fm,s,b,1,h1,memcached,1.5,0.5,123456\n" +
		"fm,s,b,1,h2,trace,0.25,,\n"
	if string(csv) != want {
		t.Errorf("csv:\n%s\nwant:\n%s", csv, want)
	}
	text := back.Runs[0].Tables[0].Text("hosts of a")
	if got := strings.Join(text.Header, "|"); got != "host|app|completion_s|blocked_s (ms)|evictions (pages)" {
		t.Errorf("header %s", got)
	}
	if got := strings.Join(text.Rows[0], "|"); got != "h1|memcached|1.500|12.50|123,456" {
		t.Errorf("row %s", got)
	}
	// Runs without tables write what they always wrote.
	plain := &Results{Schema: Schema, Experiment: "x", Metrics: []MetricInfo{{Name: "m"}}, Runs: []Run{{Policy: "a", Scenario: "s", Metrics: Metrics{"m": 1}}}}
	if data, _ := plain.Marshal(); strings.Contains(string(data), "tables") {
		t.Error("a run without tables writes a tables field")
	}
}

func TestEntityTableValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*EntityTable)
		want string
	}{
		{"unknown value", func(e *EntityTable) { e.Rows[0].Values["x"] = 1 }, "value x has no column"},
		{"duplicate id", func(e *EntityTable) { e.Rows[1].ID = "h1" }, "host \"h1\" appears twice"},
		{"duplicate column", func(e *EntityTable) { e.Columns[1].Name = "completion_s" }, "defined twice"},
		{"label", func(e *EntityTable) { e.Rows[0].Labels["zone"] = "a" }, "label zone is not in labels"},
		{"infinite", func(e *EntityTable) { e.Rows[0].Values["blocked_s"] = 1 / zero() }, "blocked_s is +Inf"},
	} {
		e := hostTable(1)
		tc.mod(&e)
		if err := e.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	r := &Results{Schema: Schema, Metrics: []MetricInfo{{Name: "m"}}, Runs: []Run{{Policy: "a", Scenario: "s", Tables: []EntityTable{hostTable(1), hostTable(2)}}}}
	if err := r.Validate(); err == nil || !strings.Contains(err.Error(), "two tables are named hosts") {
		t.Errorf("two tables of one name: %v", err)
	}
}

func zero() float64 { return 0 }
