package units

import (
	"strings"
	"testing"
	"time"
)

func TestParseRate(t *testing.T) {
	tests := []struct {
		in   string
		want Rate
		err  bool
	}{
		{"100Gbps", 100 * Gbps, false},
		{"100gbps", 100 * Gbps, false},
		{"2.5Gbit/s", 2500 * Mbps, false},
		{"10G", 10 * Gbps, false},
		{"800 Mbps", 800 * Mbps, false},
		{"1000bps", 1000, false},
		{"100", 0, true}, // no unit
		{"1e3", 0, true},
		{"1Tbps", Tbps, false},
		{"-10Gbps", 0, true},
		{"0", 0, true},
		{"fast", 0, true},
		{"", 0, true},
		{"NaNGbps", 0, true},
		{"1e300Tbps", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseRate(tt.in)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v, err=%v", tt.in, got, err, tt.want, tt.err)
		}
	}
}

func TestParseBytes(t *testing.T) {
	tests := []struct {
		in   string
		want Bytes
		err  bool
	}{
		{"1500", 0, true}, // no unit
		{"1500 B", 1500, false},
		{"1500B", 1500, false},
		{"64KiB", 64 * 1024, false},
		{"1MB", 1000 * 1000, false},
		{"2GiB", 2 << 30, false},
		{"0", 0, false},
		{"-1KiB", 0, true},
		{"lots", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseBytes(tt.in)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("ParseBytes(%q) = %v, %v; want %v, err=%v", tt.in, got, err, tt.want, tt.err)
		}
	}
}

func TestParseDurationAndFraction(t *testing.T) {
	if d, err := ParseDuration("2us"); err != nil || d != 2*time.Microsecond {
		t.Errorf("ParseDuration(2us) = %v, %v", d, err)
	}
	if _, err := ParseDuration("-1us"); err == nil {
		t.Error("negative duration accepted")
	}
	if f, err := ParseFraction("5%"); err != nil || f != 0.05 {
		t.Errorf("ParseFraction(5%%) = %v, %v", f, err)
	}
	if _, err := ParseFraction("1.5"); err == nil {
		t.Error("fraction above 1 accepted")
	}
}

func TestRoundTripString(t *testing.T) {
	for _, r := range []Rate{100 * Gbps, 2500 * Mbps, 10 * Kbps, 7} {
		got, err := ParseRate(r.String())
		if err != nil || got != r {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", r.String(), got, err, r)
		}
	}
	for _, b := range []Bytes{64 * KiB, 3 * GiB, 1500} {
		got, err := ParseBytes(b.String())
		if err != nil || got != b {
			t.Errorf("ParseBytes(%q) = %v, %v; want %v", b.String(), got, err, b)
		}
	}
}

func TestTransmitTime(t *testing.T) {
	tests := []struct {
		size Bytes
		rate Rate
		ps   int64
	}{
		{1500, 10 * Gbps, 1_200_000},
		{256, 100 * Gbps, 20_480},
		{1, 3, 2_666_666_666_667}, // rounded up
		{9000, Gbps, 72_000_000},
	}
	for _, tt := range tests {
		if got := TransmitTime(tt.size, tt.rate); got != tt.ps {
			t.Errorf("TransmitTime(%d, %v) = %d ps, want %d", tt.size, tt.rate, got, tt.ps)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"100Gbps", "64KiB", "1us", "5%", "-3", "1e999G"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if r, err := ParseRate(s); err == nil && r <= 0 {
			t.Fatalf("ParseRate(%q) = %v with no error", s, r)
		}
		if b, err := ParseBytes(s); err == nil && b < 0 {
			t.Fatalf("ParseBytes(%q) = %v with no error", s, b)
		}
		if d, err := ParseDuration(s); err == nil && d < 0 {
			t.Fatalf("ParseDuration(%q) = %v with no error", s, d)
		}
		if x, err := ParseFraction(s); err == nil && (x < 0 || x > 1) {
			t.Fatalf("ParseFraction(%q) = %v with no error", s, x)
		}
	})
}

// TestBareNumbersSuggestUnits: a number without a unit is refused with a
// message that shows the value with a unit.
func TestBareNumbersSuggestUnits(t *testing.T) {
	if _, err := ParseRate("100"); err == nil || !strings.Contains(err.Error(), "100Gbps") {
		t.Errorf("ParseRate(100): %v; want a suggestion of 100Gbps", err)
	}
	if _, err := ParseBytes("1500"); err == nil || !strings.Contains(err.Error(), "1500B") {
		t.Errorf("ParseBytes(1500): %v; want a suggestion of 1500B", err)
	}
	if _, err := ParseDuration("5"); err == nil || !strings.Contains(err.Error(), "unit") {
		t.Errorf("ParseDuration(5): %v; want a unit", err)
	}
}
