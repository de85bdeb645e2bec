package logtail

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLines(t *testing.T) {
	tests := []struct {
		name, text string
		n          int
		want       string
	}{
		{"empty", "", 5, ""},
		{"no lines wanted", "a\nb\n", 0, ""},
		{"fewer than n", "a\nb\n", 5, "a\nb"},
		{"last n", "a\nb\nc\nd\n", 2, "c\nd"},
		{"no trailing newline", "a\nb", 1, "b"},
		{"repeats folded", "start\nopen: x\nopen: x\nopen: x\nfatal: y\n", 5, "start\nopen: x\n(the line above 2 more times)\nfatal: y"},
		{"fold counts as a line", "start\nopen: x\nopen: x\nfatal: y\n", 2, "(the line above 1 more times)\nfatal: y"},
		{"blank lines repeated", "a\n\n\n\nb\n", 5, "a\n\n(the line above 2 more times)\nb"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Lines(tt.text, tt.n); got != tt.want {
				t.Errorf("Lines(%q, %d) = %q; want %q", tt.text, tt.n, got, tt.want)
			}
		})
	}
}

// TestFileKeepsTheLastError: a log ending in a thousand repeated lines
// after the line that matters still shows that line within a short tail.
func TestFileKeepsTheLastError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "switch.log")
	log := "Error while parsing command line arguments\n" + strings.Repeat("open: No such file or directory\n", 1000)
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	got := File(path, 3)
	if !strings.HasPrefix(got, "Error while parsing") || !strings.Contains(got, "999 more times") {
		t.Errorf("tail %q lost the error", got)
	}
	if got := File(filepath.Join(t.TempDir(), "missing"), 3); !strings.HasPrefix(got, "(open ") {
		t.Errorf("missing file: %q", got)
	}
}
