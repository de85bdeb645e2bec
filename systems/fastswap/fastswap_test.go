package fastswap_test

import (
	"testing"

	"github.com/tracebed/tracebed/systems/evict"
	"github.com/tracebed/tracebed/systems/fastswap"
)

func TestEngine(t *testing.T) {
	e := fastswap.New(fastswap.Params{}, 1)
	if e.Offload() != 2048 {
		t.Fatalf("offload %d, want MAX_RECLAIM_OFFLOAD 2048", e.Offload())
	}
	for _, tc := range []struct{ used, want int }{{1000, 0}, {1024, 0}, {1025, 1}, {2000, 976}, {4000, 2048}, {9000, 2048}} {
		if got := e.Background(&evict.State{Used: tc.used, Limit: 1024, Frames: 1024 + 2048}); got != tc.want {
			t.Errorf("used %d of limit 1024: background %d, want %d", tc.used, got, tc.want)
		}
	}
	if got := e.Direct(&evict.State{}); got != 2048 {
		t.Errorf("direct %d, want 2048", got)
	}
	for _, tc := range []struct {
		pages int
		scale float64
		want  int
	}{{2048, 1, 2048}, {2048, 256, 8}, {2048, 3000, 1}, {2048, 0, 2048}, {100, 3, 33}} {
		if got := fastswap.Scaled(tc.pages, tc.scale); got != tc.want {
			t.Errorf("Scaled(%d, %v) = %d, want %d", tc.pages, tc.scale, got, tc.want)
		}
	}
	if len(fastswap.Rules()) != 0 {
		t.Error("Fastswap installs switch rules")
	}
}
