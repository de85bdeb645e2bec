// Package yamlx decodes YAML documents into Go structs strictly and with
// positions, so that every error about an input file can name the file, the
// line and the field, and say what would have been accepted.
//
// It walks gopkg.in/yaml.v3 nodes itself instead of using yaml.v3's decoder:
// unknown keys, wrong types, missing required fields and values rejected by a
// type's own parser all become *Error values carrying the position of the
// offending node and the dotted path of the field ("links[2].rate").
package yamlx

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"

	"github.com/tracebed/tracebed/internal/problems"
)

// Pos is a position in an input file. Line and Col are 1-based; zero means unknown.
type Pos struct {
	File      string
	Line, Col int
}

func (p Pos) String() string {
	switch {
	case p.Line == 0:
		return p.File
	case p.Col == 0:
		return fmt.Sprintf("%s:%d", p.File, p.Line)
	}
	return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Col)
}

// Error is an input error at a position, about a field.
type Error struct {
	Pos   Pos
	Field string // dotted path such as "links[2].rate"; empty for syntax errors
	Msg   string
}

func (e *Error) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%s: %s", e.Pos, e.Msg)
	}
	return fmt.Sprintf("%s: %s: %s", e.Pos, e.Field, e.Msg)
}

// Errorf returns an *Error at pos about field.
func Errorf(pos Pos, field, format string, args ...any) *Error {
	return &Error{Pos: pos, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// IsInputError reports whether err is, or wraps, an *Error.
func IsInputError(err error) bool {
	var e *Error
	return errors.As(err, &e)
}

// Where records where a decoded mapping and each of its keys appeared. A
// struct field of type Where (tag `yaml:"-"`) is filled in by Decode so that
// validation after decoding can still point at the right line.
type Where struct {
	Pos
	Path string         // dotted path of the mapping itself
	keys map[string]Pos // position of each key's value
}

// Has reports whether key was present in the mapping. Items of a list value
// are keys too: "endpoints[1]".
func (w Where) Has(key string) bool {
	_, ok := w.keys[key]
	return ok
}

// At returns the position of key's value, or of the mapping if key is absent.
func (w Where) At(key string) Pos {
	if p, ok := w.keys[key]; ok {
		return p
	}
	return w.Pos
}

// Field returns the dotted path of key within the mapping.
func (w Where) Field(key string) string { return JoinPath(w.Path, key) }

// Errorf returns an *Error about key of this mapping.
func (w Where) Errorf(key, format string, args ...any) *Error {
	return Errorf(w.At(key), w.Field(key), format, args...)
}

// JoinPath appends key to a dotted path.
func JoinPath(path, key string) string {
	if path == "" {
		return key
	}
	if strings.HasPrefix(key, "[") {
		return path + key
	}
	return path + "." + key
}

// ScalarUnmarshaler is implemented by types parsed from the text of a scalar,
// such as rates and sizes. The returned error's text becomes the message of
// the *Error that Decode reports.
type ScalarUnmarshaler interface {
	UnmarshalScalar(s string) error
}

// MaxFileSize bounds the YAML files tracebed reads (specs, topologies):
// far above any real one, far below what would exhaust memory.
const MaxFileSize = 64 << 20

// ReadFile reads a YAML input file: a regular file (not a device, a pipe
// or a directory, which could block or never end) of at most MaxFileSize
// bytes. Its errors wrap the fs errors (fs.ErrNotExist, …); the others are
// input errors.
func ReadFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, Errorf(Pos{File: path}, "", "not a regular file (%v); tracebed reads specs and topologies from files", fi.Mode().Type())
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileSize {
		return nil, Errorf(Pos{File: path}, "", "larger than %d MiB; a spec or topology is a few kilobytes", MaxFileSize>>20)
	}
	return data, nil
}

// Parse reads one YAML document. Syntax errors become *Error with the line.
// An empty document is an error.
func Parse(file string, data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, Errorf(Pos{File: file, Line: 1}, "", "file is empty (or only comments)")
		}
		return nil, syntaxError(file, data, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, Errorf(Pos{File: file, Line: extra.Line}, "", "more than one YAML document; tracebed files hold one")
	} else if !errors.Is(err, io.EOF) {
		return nil, syntaxError(file, data, err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, Errorf(Pos{File: file, Line: 1}, "", "not a YAML document")
	}
	if n := expandedSize(doc.Content[0], map[*yaml.Node]int{}); n > MaxExpandedNodes {
		return nil, Errorf(NodePos(file, doc.Content[0]), "", "the document expands to more than %d values through aliases", MaxExpandedNodes)
	}
	return doc.Content[0], nil
}

// MaxExpandedNodes bounds the size of a document once its aliases are
// expanded, so that a small file of nested aliases cannot make decoding
// take exponential time.
const MaxExpandedNodes = 1 << 20

// expandedSize counts the values of n with aliases expanded, memoized so it
// takes linear time; it saturates above MaxExpandedNodes.
func expandedSize(n *yaml.Node, memo map[*yaml.Node]int) int {
	if v, ok := memo[n]; ok {
		return v
	}
	memo[n] = MaxExpandedNodes + 1 // a node that contains itself is infinite
	size := 1
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		size = expandedSize(n.Alias, memo)
	}
	for _, c := range n.Content {
		size += expandedSize(c, memo)
		if size > MaxExpandedNodes {
			size = MaxExpandedNodes + 1
			break
		}
	}
	memo[n] = size
	return size
}

// syntaxError turns yaml.v3's "yaml: line 3: ..." into an *Error at line 3.
// yaml.v3 gives no line for bytes it cannot read at all (control
// characters, invalid UTF-8): the error points at the first such byte.
func syntaxError(file string, data []byte, err error) *Error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if i := strings.Index(rest, ":"); i > 0 {
			if n, err := strconv.Atoi(rest[:i]); err == nil {
				line = n
				msg = strings.TrimSpace(rest[i+1:])
				// yaml.v3 prints parser errors (as opposed to scanner
				// errors) with the 0-based line of the construct being
				// parsed; make it 1-based like everything else.
				if strings.HasPrefix(msg, "did not find expected") {
					line++
				}
			}
		}
	}
	pos := Pos{File: file, Line: line}
	if line == 0 {
		pos = badByte(file, data)
	}
	return Errorf(pos, "", "YAML syntax: %s", msg)
}

// badByte returns the position of the first byte of data that YAML does
// not allow (a control character other than tab, newline and carriage
// return, or invalid UTF-8), or line 1 if there is none.
func badByte(file string, data []byte) Pos {
	line, col := 1, 1
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && size <= 1 || r < 0x20 && r != '\t' && r != '\n' && r != '\r' || r == 0x7f || r == 0xfeff && i > 0 {
			return Pos{File: file, Line: line, Col: col}
		}
		if r == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
		i += size
	}
	return Pos{File: file, Line: 1}
}

// NodePos returns the position of n in file.
func NodePos(file string, n *yaml.Node) Pos {
	return Pos{File: file, Line: n.Line, Col: n.Column}
}

// Pair is one key/value of a mapping, in file order.
type Pair struct {
	Key   string
	Pos   Pos // position of the key
	Value *yaml.Node
}

// Pairs returns the entries of a mapping node in file order, resolving
// aliases. It rejects duplicate keys and anything that is not a mapping.
func Pairs(file string, n *yaml.Node, path string) ([]Pair, error) {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		return nil, Errorf(NodePos(file, n), path, "want a mapping (key: value lines), got %s", kindName(n))
	}
	var out []Pair
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return nil, Errorf(NodePos(file, k), path, "mapping keys must be plain names")
		}
		if k.Value == "<<" { // merge key: entries of the merged mapping(s) come first
			merged, err := mergePairs(file, v, path)
			if err != nil {
				return nil, err
			}
			for _, p := range merged {
				if !seen[p.Key] {
					seen[p.Key] = true
					out = append(out, p)
				}
			}
			continue
		}
		if seen[k.Value] {
			if j := indexPair(out, k.Value); j >= 0 && out[j].Pos.Line != 0 && !isMerged(out[j]) {
				return nil, Errorf(NodePos(file, k), JoinPath(path, k.Value), "duplicate key (first at line %d)", out[j].Pos.Line)
			}
			// An explicit key overrides one that came from a merge.
			out[indexPair(out, k.Value)] = Pair{Key: k.Value, Pos: NodePos(file, k), Value: v}
			continue
		}
		seen[k.Value] = true
		out = append(out, Pair{Key: k.Value, Pos: NodePos(file, k), Value: v})
	}
	return out, nil
}

// mergedMark tags pairs that came from a "<<" merge key.
const mergedMark = -1

func isMerged(p Pair) bool { return p.Pos.Col == mergedMark }

func mergePairs(file string, v *yaml.Node, path string) ([]Pair, error) {
	v = resolve(v)
	var srcs []*yaml.Node
	switch v.Kind {
	case yaml.MappingNode:
		srcs = []*yaml.Node{v}
	case yaml.SequenceNode:
		srcs = v.Content
	default:
		return nil, Errorf(NodePos(file, v), path, "merge key << needs a mapping or a list of mappings")
	}
	var out []Pair
	for _, s := range srcs {
		ps, err := Pairs(file, s, path)
		if err != nil {
			return nil, err
		}
		for _, p := range ps {
			if indexPair(out, p.Key) < 0 {
				p.Pos.Col = mergedMark
				out = append(out, p)
			}
		}
	}
	return out, nil
}

func indexPair(ps []Pair, key string) int {
	for i, p := range ps {
		if p.Key == key {
			return i
		}
	}
	return -1
}

func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "nothing (null)"
		}
		return fmt.Sprintf("%q", n.Value)
	}
	return "an unsupported node"
}

var (
	whereType = reflect.TypeFor[Where]()
	nodeType  = reflect.TypeFor[yaml.Node]()
	scalarT   = reflect.TypeFor[ScalarUnmarshaler]()
)

// Decode decodes n into v, which must be a non-nil pointer. Struct fields are
// matched by their yaml tag name; the tag option "required" makes a key
// mandatory. Keys with no matching field are errors. Fields not present in
// the YAML keep their previous values, so callers set defaults before decoding.
// A field of type *yaml.Node or yaml.Node receives the raw node; a field of
// type Where receives the mapping's positions.
func Decode(file string, n *yaml.Node, path string, v any) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("yamlx.Decode: need a non-nil pointer, got %T", v)
	}
	d := decoder{file: file}
	d.probs.Add(d.value(n, path, rv.Elem()))
	return d.probs.Err()
}

// decoder decodes one node, collecting every problem: a field that fails
// to decode, an unknown or missing field, a bad list item are recorded and
// decoding goes on with the next.
type decoder struct {
	file  string
	probs problems.List
}

func (d *decoder) errorf(n *yaml.Node, path, format string, args ...any) error {
	return Errorf(NodePos(d.file, n), path, format, args...)
}

func (d *decoder) value(n *yaml.Node, path string, v reflect.Value) error {
	n = resolve(n)
	if v.Type() == nodeType {
		v.Set(reflect.ValueOf(*n))
		return nil
	}
	if v.Kind() == reflect.Pointer {
		if v.Type().Elem() == nodeType {
			v.Set(reflect.ValueOf(n))
			return nil
		}
		if isNull(n) {
			return nil
		}
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		return d.value(n, path, v.Elem())
	}
	if v.CanAddr() && v.Addr().Type().Implements(scalarT) {
		if n.Kind != yaml.ScalarNode || isNull(n) {
			return d.errorf(n, path, "want a single value, got %s", kindName(n))
		}
		if err := v.Addr().Interface().(ScalarUnmarshaler).UnmarshalScalar(n.Value); err != nil {
			return d.errorf(n, path, "%v", err)
		}
		return nil
	}
	switch v.Kind() {
	case reflect.Struct:
		return d.structValue(n, path, v)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return d.errorf(n, path, "want a list, got %s", kindName(n))
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, c := range n.Content {
			d.probs.Add(d.value(c, fmt.Sprintf("%s[%d]", path, i), s.Index(i)))
		}
		v.Set(s)
		return nil
	case reflect.Map:
		if v.Type().Key().Kind() != reflect.String {
			return fmt.Errorf("yamlx: unsupported map key type %s", v.Type().Key())
		}
		pairs, err := Pairs(d.file, n, path)
		if err != nil {
			return err
		}
		m := reflect.MakeMapWithSize(v.Type(), len(pairs))
		for _, p := range pairs {
			e := reflect.New(v.Type().Elem()).Elem()
			if err := d.value(p.Value, JoinPath(path, p.Key), e); err != nil {
				d.probs.Add(err)
				continue
			}
			m.SetMapIndex(reflect.ValueOf(p.Key).Convert(v.Type().Key()), e)
		}
		v.Set(m)
		return nil
	}
	if n.Kind != yaml.ScalarNode || isNull(n) {
		return d.errorf(n, path, "want a single value, got %s", kindName(n))
	}
	return d.scalar(n, path, v)
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

func (d *decoder) scalar(n *yaml.Node, path string, v reflect.Value) error {
	s := n.Value
	switch v.Kind() {
	case reflect.String:
		v.SetString(s)
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return d.errorf(n, path, "%q is not true or false", s)
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		i, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 0, v.Type().Bits())
		if err != nil {
			if f, ferr := strconv.ParseFloat(s, 64); ferr == nil && f == math.Trunc(f) && math.Abs(f) < 1<<53 {
				i = int64(f) // accept 1e6 for a count
			} else {
				return d.errorf(n, path, "%q is not a whole number", s)
			}
		}
		if v.OverflowInt(i) {
			return d.errorf(n, path, "%q is out of range", s)
		}
		v.SetInt(i)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		u, err := strconv.ParseUint(strings.ReplaceAll(s, "_", ""), 0, v.Type().Bits())
		if err != nil {
			return d.errorf(n, path, "%q is not a non-negative whole number", s)
		}
		v.SetUint(u)
	case reflect.Float32, reflect.Float64:
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return d.errorf(n, path, "%q is not a number", s)
		}
		v.SetFloat(f)
	default:
		return fmt.Errorf("yamlx: unsupported field type %s at %s", v.Type(), path)
	}
	return nil
}

type fieldInfo struct {
	index    []int
	required bool
}

// structFields lists the YAML fields of t, descending into embedded structs
// tagged ",inline", and the index paths of its Where fields.
func structFields(t reflect.Type, prefix []int, fields map[string]fieldInfo, names *[]string, wheres *[][]int) {
	for i := range t.NumField() {
		f := t.Field(i)
		idx := append(slices.Clone(prefix), i)
		if f.Type == whereType {
			*wheres = append(*wheres, idx)
			continue
		}
		tag := f.Tag.Get("yaml")
		if tag == "-" || !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		opts = "," + opts + ","
		if strings.Contains(opts, ",inline,") && f.Type.Kind() == reflect.Struct {
			structFields(f.Type, idx, fields, names, wheres)
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		fields[name] = fieldInfo{index: idx, required: strings.Contains(opts, ",required,")}
		*names = append(*names, name)
	}
}

func (d *decoder) structValue(n *yaml.Node, path string, v reflect.Value) error {
	pairs, err := Pairs(d.file, n, path)
	if err != nil {
		return err
	}
	fields := map[string]fieldInfo{}
	var names []string
	var wheres [][]int
	structFields(v.Type(), nil, fields, &names, &wheres)
	where := Where{Pos: NodePos(d.file, n), Path: path, keys: map[string]Pos{}}
	for _, p := range pairs {
		fi, ok := fields[p.Key]
		if !ok {
			pos := p.Pos
			if isMerged(p) {
				pos = where.Pos
			}
			d.probs.Add(Errorf(pos, JoinPath(path, p.Key), "unknown field; known fields here: %s", strings.Join(names, ", ")))
			continue
		}
		val := resolve(p.Value)
		where.keys[p.Key] = NodePos(d.file, val)
		if val.Kind == yaml.SequenceNode {
			for i, item := range val.Content {
				where.keys[fmt.Sprintf("%s[%d]", p.Key, i)] = NodePos(d.file, resolve(item))
			}
		}
		d.probs.Add(d.value(p.Value, JoinPath(path, p.Key), v.FieldByIndex(fi.index)))
	}
	for _, name := range names {
		if fields[name].required && !where.Has(name) {
			d.probs.Add(Errorf(where.Pos, JoinPath(path, name), "missing; this field is required"))
		}
	}
	for _, idx := range wheres {
		v.FieldByIndex(idx).Set(reflect.ValueOf(where))
	}
	return nil
}
