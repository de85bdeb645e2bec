package topologies_test

import (
	"strings"
	"testing"

	"github.com/tracebed/tracebed/topologies"
)

// TestHostAddressesMustBeUnicast: addresses no host can have are refused
// with the field named.
func TestHostAddressesMustBeUnicast(t *testing.T) {
	for _, ip := range []string{"0.0.0.0", "0.1.2.3", "127.0.0.1", "224.0.0.1", "239.1.1.1", "255.255.255.255", "169.254.0.1", "240.0.0.1"} {
		y := "topology:\n  nodes:\n    s1: {kind: switch}\n    h1: {kind: host, ip: " + ip + "}\n    h2: {kind: host}\n  links:\n    - {endpoints: [h1, s1]}\n    - {endpoints: [h2, s1]}\n"
		_, err := topologies.Parse("t.yaml", []byte(y))
		if err == nil || !strings.Contains(err.Error(), "t.yaml:4:") || !strings.Contains(err.Error(), "topology.nodes.h1.ip") {
			t.Errorf("ip %s: %v", ip, err)
		}
	}
	y := "topology:\n  nodes:\n    s1: {kind: switch, aggregators: 1000000000000}\n    h1: {kind: host}\n  links:\n    - {endpoints: [h1, s1]}\n"
	if _, err := topologies.Parse("t.yaml", []byte(y)); err == nil || !strings.Contains(err.Error(), "t.yaml:3:") || !strings.Contains(err.Error(), "aggregators") {
		t.Errorf("aggregators 1e12: %v", err)
	}
}
