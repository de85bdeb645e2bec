package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/tracebed/tracebed/emulator/testbed"
	"github.com/tracebed/tracebed/experiments"
)

// pcapPort is a NODE:PORT of --pcap-port.
type pcapPort struct {
	node string
	num  int
}

// parsePcapPorts checks the --pcap-port values.
func parsePcapPorts(ports []string) ([]pcapPort, error) {
	var out []pcapPort
	for _, p := range ports {
		node, num, ok := strings.Cut(p, ":")
		n, err := strconv.Atoi(num)
		if !ok || node == "" || err != nil || n < 1 {
			return nil, fmt.Errorf("--pcap-port %q: want NODE:PORT, e.g. tor:1", p)
		}
		out = append(out, pcapPort{node, n})
	}
	return out, nil
}

// pcapCapture is the capture of 'run --pcap DIR': every testbed a run
// builds gets a pcapng file per port — the ports given, or every port of
// every switch — in DIR/<experiment>/, named
// <scenario>-<policy>-seed<N>[-tb<K>]-<node>-<port>.pcapng. Kinds whose
// runs build no testbed (incast, the flow-level ina runs) capture nothing.
func pcapCapture(dir, experiment string, ports []pcapPort) func(experiments.Run, testbed.Testbed) (func() error, error) {
	var mu sync.Mutex
	built := map[string]int{} // testbeds per run
	safe := strings.NewReplacer("/", "_", " ", "_", ":", "_").Replace
	return func(r experiments.Run, tb testbed.Testbed) (func() error, error) {
		c, ok := tb.(testbed.Capturer)
		if !ok {
			return nil, fmt.Errorf("the %s testbed cannot capture", tb.Substrate())
		}
		run := fmt.Sprintf("%s-%s-seed%d", safe(r.Scenario), safe(r.Policy), r.Seed)
		mu.Lock()
		built[run]++
		if k := built[run]; k > 1 {
			run += fmt.Sprintf("-tb%d", k)
		}
		mu.Unlock()
		want := ports
		if len(want) == 0 {
			for _, sw := range tb.Topology().Switches() {
				for _, p := range sw.Ports {
					want = append(want, pcapPort{sw.Name, p.Num})
				}
			}
		}
		out := filepath.Join(dir, experiment)
		if err := os.MkdirAll(out, 0o755); err != nil {
			return nil, err
		}
		var stops []func() error
		stopAll := func() error {
			var first error
			for _, s := range stops {
				if err := s(); err != nil && first == nil {
					first = err
				}
			}
			return first
		}
		for _, p := range want {
			f, err := os.Create(filepath.Join(out, fmt.Sprintf("%s-%s-%d.pcapng", run, safe(p.node), p.num)))
			if err != nil {
				stopAll()
				return nil, err
			}
			stop, err := c.Capture(p.node, p.num, f)
			if err != nil {
				f.Close()
				stopAll()
				return nil, err
			}
			stops = append(stops, func() error {
				err := stop()
				if cerr := f.Close(); err == nil {
					err = cerr
				}
				return err
			})
		}
		return stopAll, nil
	}
}
