// Package logtail reads the end of a process's log for an error message:
// the last lines, with runs of one repeated line folded into one, so that
// a process that prints the same complaint every second (bmv2's port
// monitor, for one) does not push the line that matters out of the tail.
package logtail

import (
	"fmt"
	"os"
	"strings"
)

// File returns the last n lines of the file at path, folded by Lines; a
// file that cannot be read gives its error in parentheses.
func File(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	return Lines(string(data), n)
}

// Lines returns the last n lines of text after folding every run of
// identical consecutive lines into the line and a note of how many more
// times it came, e.g. "open: No such file or directory" followed by
// "(the line above 41 more times)".
func Lines(text string, n int) string {
	text = strings.TrimRight(text, "\n")
	if text == "" || n <= 0 {
		return ""
	}
	var out []string
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); {
		j := i + 1
		for j < len(lines) && lines[j] == lines[i] {
			j++
		}
		out = append(out, lines[i])
		if j-i > 1 {
			out = append(out, fmt.Sprintf("(the line above %d more times)", j-i-1))
		}
		i = j
	}
	return strings.Join(out[max(len(out)-n, 0):], "\n")
}
