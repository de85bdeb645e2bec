package yamlx

import (
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/tracebed/tracebed/internal/problems"
)

type inner struct {
	A int     `yaml:"a"`
	B float64 `yaml:"b"`
	W Where   `yaml:"-"`
}

type outer struct {
	Name  string           `yaml:"name,required"`
	List  []inner          `yaml:"list"`
	Map   map[string]int   `yaml:"map"`
	Ptr   *int             `yaml:"ptr"`
	Flag  bool             `yaml:"flag"`
	Inner `yaml:",inline"` // a, b and W promoted
}

type Inner struct {
	C string `yaml:"c"`
}

func TestDecode(t *testing.T) {
	src := `name: x
base: &b {a: 1, b: 2.5}
list:
  - *b
  - {<<: *b, a: 7}
map: {k: 3}
ptr: 4
flag: true
c: hello
`
	root, err := Parse("t.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	// "base" is not a field: decoding must refuse it, naming the line.
	var o outer
	err = Decode("t.yaml", root, "", &o)
	if err == nil || !strings.Contains(err.Error(), "t.yaml:2:1: base: unknown field") {
		t.Fatalf("got %v", err)
	}
	root.Content = root.Content[:2]
	root.Content = append(root.Content, mustParse(t, src).Content[4:]...)
	if err := Decode("t.yaml", root, "", &o); err != nil {
		t.Fatal(err)
	}
	if o.Name != "x" || len(o.List) != 2 || o.List[0].A != 1 || o.List[1].A != 7 || o.List[1].B != 2.5 ||
		o.Map["k"] != 3 || *o.Ptr != 4 || !o.Flag || o.C != "hello" {
		t.Fatalf("%+v", o)
	}
	if w := o.List[1].W; !w.Has("a") || w.At("a").Line != 5 || w.Field("a") != "list[1].a" {
		t.Errorf("where: %+v", w)
	}
}

func mustParse(t *testing.T, s string) *yaml.Node {
	t.Helper()
	n, err := Parse("t.yaml", []byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestDecodeErrors(t *testing.T) {
	tests := []struct{ src, want string }{
		{"list: 3\n", "t.yaml:1:7: list: want a list"},
		{"name: x\nptr: [1]\n", "t.yaml:2:6: ptr: want a single value"},
		{"name: x\nlist: [{a: 1.5}]\n", `t.yaml:2:12: list[0].a: "1.5" is not a whole number`},
		{"name: x\nflag: maybe\n", `t.yaml:2:7: flag: "maybe" is not true or false`},
		{"flag: true\n", "t.yaml:1:1: name: missing"},
		{"name: x\nname: y\n", "t.yaml:2:1: name: duplicate key (first at line 1)"},
		{"name: x\nmap: {k: 1e400}\n", `map.k: "1e400" is not a whole number`},
		{"- a\n", "want a mapping"},
	}
	for _, tt := range tests {
		var o outer
		root, err := Parse("t.yaml", []byte(tt.src))
		if err == nil {
			err = Decode("t.yaml", root, "", &o)
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: got %v, want %q", tt.src, err, tt.want)
		}
	}
}

// TestDecodeEveryProblem: Decode goes on past a bad field, a bad list
// item and an unknown key, and reports each with its line and field.
func TestDecodeEveryProblem(t *testing.T) {
	src := "flag: maybe\nlist: [{a: 1}, {a: x}, {a: 2, z: 1}]\nmap: {k: 1, j: y}\nptr: [1]\nextra: 1\n"
	root, err := Parse("t.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	var o outer
	err = Decode("t.yaml", root, "", &o)
	if err == nil {
		t.Fatal("accepted")
	}
	want := []string{
		`t.yaml:1:7: flag: "maybe" is not true or false`,
		`t.yaml:2:20: list[1].a: "x" is not a whole number`,
		`t.yaml:2:31: list[2].z: unknown field`,
		`t.yaml:3:16: map.j: "y" is not a whole number`,
		`t.yaml:4:6: ptr: want a single value`,
		`t.yaml:5:1: extra: unknown field`,
		`t.yaml:1:1: name: missing`,
	}
	if err := problems.Match(err, want); err != nil {
		t.Error(err)
	}
	// The good parts are decoded.
	if len(o.List) != 3 || o.List[0].A != 1 || o.List[2].A != 2 || o.Map["k"] != 1 {
		t.Errorf("decoded %+v", o)
	}
}

func TestParseErrors(t *testing.T) {
	for src, want := range map[string]string{
		"":                          "t.yaml:1: file is empty",
		"# nothing\n":               "t.yaml:1: file is empty",
		"a: 1\n---\nb: 2\n":         "more than one YAML document",
		"a: [1\n":                   "YAML syntax",
		"a: 1\nb: x\x01y\n":         "t.yaml:2:5: YAML syntax: control characters",
		"a: 1\nb: 2\nc: \xff\n":     "t.yaml:3:4: YAML syntax",
		"a: *nosuch\n":              "t.yaml:1:",
		"a: &x [*x]\n":              "t.yaml:1:",
		"a: 1\n\x1b[31mb: 2\n":      "t.yaml:2:1:",
		"a: \"unterminated\nb: 1\n": "t.yaml:",
	} {
		if _, err := Parse("t.yaml", []byte(src)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want %q", src, err, want)
		}
	}
}

func TestAliasBomb(t *testing.T) {
	src := "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
	prev := "a"
	for i := range 8 {
		name := string(rune('b' + i))
		src += name + ": &" + name + " [*" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + "]\n"
		prev = name
	}
	if _, err := Parse("bomb.yaml", []byte(src)); err == nil || !strings.Contains(err.Error(), "through aliases") {
		t.Fatalf("alias bomb accepted: %v", err)
	}
}
