package yamlx

import (
	"errors"
	"regexp"
	"testing"

	"github.com/tracebed/tracebed/internal/problems"
)

// where matches the position every input error starts with: the file and a
// line of it.
var where = regexp.MustCompile(`^t\.yaml:[1-9][0-9]*(:[1-9][0-9]*)?: `)

// FuzzDecode parses and decodes arbitrary documents into a struct with
// nested mappings, lists, maps, pointers and an inline struct: nothing
// panics, and every problem reported is an *Error whose text begins with
// the file and a line.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		"name: x\nbase: &b {a: 1, b: 2.5}\nlist:\n  - *b\n  - {<<: *b, a: 7}\nmap: {k: 3}\nptr: 4\nflag: true\nc: hello\n",
		"flag: maybe\nlist: [{a: 1}, {a: x}, {a: 2, z: 1}]\nmap: {k: 1, j: y}\nptr: [1]\nextra: 1\n",
		"name: x\nmap: {k: 1e400}\n",
		"a: &x [*x]\n",
		"- a\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		root, err := Parse("t.yaml", data)
		if err == nil {
			var o outer
			err = Decode("t.yaml", root, "", &o)
		}
		if err == nil {
			return
		}
		for _, e := range problems.Split(err) {
			var ye *Error
			if !errors.As(e, &ye) || !where.MatchString(e.Error()) {
				t.Fatalf("problem %q (%T) does not name t.yaml and a line", e, e)
			}
		}
	})
}
