package p4rt

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/big"
	"slices"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// This file turns the entities of a P4Info into their canonical, validated
// form (P4Runtime 1.4.1 §9.1.1 match format, §9.1.2 action specification):
// the form a Target stores, keys its entries by, and reads back.

func errf(c codes.Code, format string, args ...any) error { return status.Errorf(c, format, args...) }

// prefix puts context before a status error's message, keeping its code.
func prefix(err error, format string, args ...any) error {
	st := status.Convert(err)
	return status.Errorf(st.Code(), "%s: %s", fmt.Sprintf(format, args...), st.Message())
}

// FieldValue is one field of a validated match key, in canonical form
// (byte strings without leading zero bytes).
type FieldValue struct {
	// Name and Kind are the P4Info field's.
	Name string
	Kind p4configv1.MatchField_MatchType
	// Set is false for a "don't care" field (omitted from the key: a
	// ternary, LPM, range or optional field matching everything).
	Set bool
	// Value is the exact, optional, LPM or ternary value, or the low end
	// of a range.
	Value []byte
	// Mask is the ternary mask, or the high end of a range.
	Mask []byte
	// PrefixLen is the LPM prefix length.
	PrefixLen int32
	width     int
}

// Uint returns b (canonical, at most 8 bytes for the Go twins' fields) as
// an integer; longer strings give their low 64 bits.
func Uint(b []byte) uint64 {
	var v uint64
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	return v
}

// allOnes reports whether v is the largest value of width bits.
func allOnes(v []byte, width int) bool {
	if bitLen(v) != width {
		return false
	}
	x := new(big.Int).SetBytes(v)
	x.Add(x, big.NewInt(1))
	return x.BitLen() == width+1 && x.TrailingZeroBits() == uint(width)
}

// cmpBytes compares two canonical unsigned byte strings.
func cmpBytes(a, b []byte) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	return bytes.Compare(a, b)
}

type tableInfo struct {
	t             *p4configv1.Table
	id            uint32
	name          string
	fields        []*p4configv1.MatchField
	fieldIndex    map[uint32]int
	needsPriority bool
	actions       map[uint32]p4configv1.ActionRef_Scope
	profile       *profileInfo // the implementation, nil for a direct table
	initial       *Call        // the initial default action, nil if none
	constDefault  bool
	directRes     bool

	apply   func(*Change) error
	entries map[string]*Entry
	def     *Entry
	seq     uint64
}

type actionInfo struct {
	a      *p4configv1.Action
	params []*p4configv1.Action_Param
	index  map[uint32]int    // param id → index
	byName map[string]int    // param name → index
	check  func(*Call) error // the program's validation, may be nil
}

// Call is a validated action with its arguments in canonical form.
type Call struct {
	info *actionInfo
	args [][]byte // by parameter, in P4Info order
}

// ID returns the action's P4Info id.
func (c *Call) ID() uint32 { return c.info.a.GetPreamble().GetId() }

// Name returns the action's P4Info name.
func (c *Call) Name() string { return c.info.a.GetPreamble().GetName() }

// Bytes returns the canonical value of the named parameter (nil if the
// action has no such parameter).
func (c *Call) Bytes(param string) []byte {
	if i, ok := c.info.byName[param]; ok {
		return c.args[i]
	}
	return nil
}

// Uint returns the named parameter as an integer (0 if the action has no
// such parameter).
func (c *Call) Uint(param string) uint64 { return Uint(c.Bytes(param)) }

// Message returns the action in its canonical P4Runtime form.
func (c *Call) Message() *p4v1.Action {
	a := &p4v1.Action{ActionId: c.ID()}
	for i, p := range c.info.params {
		a.Params = append(a.Params, &p4v1.Action_Param{ParamId: p.GetId(), Value: slices.Clone(c.args[i])})
	}
	return a
}

func (c *Call) equal(o *Call) bool {
	if c == nil || o == nil {
		return c == o
	}
	if c.info != o.info {
		return false
	}
	for i := range c.args {
		if !bytes.Equal(c.args[i], o.args[i]) {
			return false
		}
	}
	return true
}

// decodeMatch validates a table entry's match and returns its fields in
// P4Info order and the key that identifies the entry with its priority.
func decodeMatch(ti *tableInfo, ms []*p4v1.FieldMatch, priority int32) ([]FieldValue, string, error) {
	given := make([]*p4v1.FieldMatch, len(ti.fields))
	for _, m := range ms {
		i, ok := ti.fieldIndex[m.GetFieldId()]
		if !ok {
			return nil, "", errf(codes.InvalidArgument, "table %s has no match field with id %d", ti.name, m.GetFieldId())
		}
		if given[i] != nil {
			return nil, "", errf(codes.InvalidArgument, "table %s: match field %q given twice", ti.name, ti.fields[i].GetName())
		}
		given[i] = m
	}
	out := make([]FieldValue, len(ti.fields))
	key := binary.BigEndian.AppendUint32(nil, uint32(priority))
	for i, mf := range ti.fields {
		fv, err := decodeField(mf, given[i])
		if err != nil {
			return nil, "", prefix(err, "table %s: field %q", ti.name, mf.GetName())
		}
		out[i] = fv
		key = append(key, byte(fv.Kind), byte(len(fv.Value)))
		key = append(key, fv.Value...)
		key = append(key, byte(len(fv.Mask)))
		key = append(key, fv.Mask...)
		key = binary.BigEndian.AppendUint32(key, uint32(fv.PrefixLen))
		if !fv.Set {
			key = append(key, '*')
		}
	}
	if ti.needsPriority && priority <= 0 {
		return nil, "", errf(codes.InvalidArgument, "table %s has ternary, range or optional fields: entries need a positive priority, not %d", ti.name, priority)
	}
	if !ti.needsPriority && priority != 0 {
		return nil, "", errf(codes.InvalidArgument, "table %s has no ternary, range or optional field: priority must be 0, not %d", ti.name, priority)
	}
	return out, string(key), nil
}

// decodeField validates one field of a match (§9.1.1); m is nil for an
// omitted field.
func decodeField(mf *p4configv1.MatchField, m *p4v1.FieldMatch) (FieldValue, error) {
	w := int(mf.GetBitwidth())
	fv := FieldValue{Name: mf.GetName(), Kind: mf.GetMatchType(), width: w}
	if _, other := mf.GetMatch().(*p4configv1.MatchField_OtherMatchType); other {
		return fv, errf(codes.Unimplemented, "match kind %q is not supported", mf.GetOtherMatchType())
	}
	if m == nil {
		if fv.Kind == p4configv1.MatchField_EXACT {
			return fv, errf(codes.InvalidArgument, "an exact field cannot be omitted")
		}
		return fv, nil
	}
	fv.Set = true
	var err error
	switch fv.Kind {
	case p4configv1.MatchField_EXACT:
		x := m.GetExact()
		if x == nil {
			return fv, errf(codes.InvalidArgument, "the field is exact; the match gives %s", matchKind(m))
		}
		fv.Value, err = CanonicalBits(x.GetValue(), w)
	case p4configv1.MatchField_OPTIONAL:
		x := m.GetOptional()
		if x == nil {
			return fv, errf(codes.InvalidArgument, "the field is optional; the match gives %s", matchKind(m))
		}
		fv.Value, err = CanonicalBits(x.GetValue(), w)
	case p4configv1.MatchField_LPM:
		x := m.GetLpm()
		if x == nil {
			return fv, errf(codes.InvalidArgument, "the field is lpm; the match gives %s", matchKind(m))
		}
		if fv.Value, err = CanonicalBits(x.GetValue(), w); err != nil {
			return fv, err
		}
		fv.PrefixLen = x.GetPrefixLen()
		if fv.PrefixLen <= 0 || int(fv.PrefixLen) > w {
			return fv, errf(codes.InvalidArgument, "prefix length %d outside 1..%d (omit the field for a don't-care match)", fv.PrefixLen, w)
		}
		if v := new(big.Int).SetBytes(fv.Value); v.Sign() != 0 && int(v.TrailingZeroBits()) < w-int(fv.PrefixLen) {
			return fv, errf(codes.InvalidArgument, "value 0x%x has bits set beyond its /%d prefix", fv.Value, fv.PrefixLen)
		}
	case p4configv1.MatchField_TERNARY:
		x := m.GetTernary()
		if x == nil {
			return fv, errf(codes.InvalidArgument, "the field is ternary; the match gives %s", matchKind(m))
		}
		if fv.Value, err = CanonicalBits(x.GetValue(), w); err != nil {
			return fv, err
		}
		if fv.Mask, err = CanonicalBits(x.GetMask(), w); err != nil {
			return fv, err
		}
		v, mask := new(big.Int).SetBytes(fv.Value), new(big.Int).SetBytes(fv.Mask)
		if mask.Sign() == 0 {
			return fv, errf(codes.InvalidArgument, "mask 0 (omit the field for a don't-care match)")
		}
		if new(big.Int).And(v, mask).Cmp(v) != 0 {
			return fv, errf(codes.InvalidArgument, "value 0x%x has bits outside mask 0x%x", fv.Value, fv.Mask)
		}
	case p4configv1.MatchField_RANGE:
		x := m.GetRange()
		if x == nil {
			return fv, errf(codes.InvalidArgument, "the field is a range; the match gives %s", matchKind(m))
		}
		if fv.Value, err = CanonicalBits(x.GetLow(), w); err != nil {
			return fv, err
		}
		if fv.Mask, err = CanonicalBits(x.GetHigh(), w); err != nil {
			return fv, err
		}
		if cmpBytes(fv.Value, fv.Mask) > 0 {
			return fv, errf(codes.InvalidArgument, "range low 0x%x above high 0x%x", fv.Value, fv.Mask)
		}
		if isZero(fv.Value) && allOnes(fv.Mask, w) {
			return fv, errf(codes.InvalidArgument, "the range covers every value (omit the field for a don't-care match)")
		}
	default:
		return fv, errf(codes.Unimplemented, "match kind %v is not supported", fv.Kind)
	}
	return fv, err
}

func matchKind(m *p4v1.FieldMatch) string {
	switch m.GetFieldMatchType().(type) {
	case *p4v1.FieldMatch_Exact_:
		return "an exact value"
	case *p4v1.FieldMatch_Ternary_:
		return "a ternary value"
	case *p4v1.FieldMatch_Lpm:
		return "an lpm value"
	case *p4v1.FieldMatch_Range_:
		return "a range"
	case *p4v1.FieldMatch_Optional_:
		return "an optional value"
	case nil:
		return "no value"
	}
	return "another match kind"
}

// matchMessage is the canonical form of a decoded match: set fields only,
// in P4Info order.
func matchMessage(ti *tableInfo, fs []FieldValue) []*p4v1.FieldMatch {
	var out []*p4v1.FieldMatch
	for i, fv := range fs {
		if !fv.Set {
			continue
		}
		m := &p4v1.FieldMatch{FieldId: ti.fields[i].GetId()}
		switch fv.Kind {
		case p4configv1.MatchField_EXACT:
			m.FieldMatchType = &p4v1.FieldMatch_Exact_{Exact: &p4v1.FieldMatch_Exact{Value: fv.Value}}
		case p4configv1.MatchField_OPTIONAL:
			m.FieldMatchType = &p4v1.FieldMatch_Optional_{Optional: &p4v1.FieldMatch_Optional{Value: fv.Value}}
		case p4configv1.MatchField_LPM:
			m.FieldMatchType = &p4v1.FieldMatch_Lpm{Lpm: &p4v1.FieldMatch_LPM{Value: fv.Value, PrefixLen: fv.PrefixLen}}
		case p4configv1.MatchField_TERNARY:
			m.FieldMatchType = &p4v1.FieldMatch_Ternary_{Ternary: &p4v1.FieldMatch_Ternary{Value: fv.Value, Mask: fv.Mask}}
		case p4configv1.MatchField_RANGE:
			m.FieldMatchType = &p4v1.FieldMatch_Range_{Range: &p4v1.FieldMatch_Range{Low: fv.Value, High: fv.Mask}}
		}
		out = append(out, m)
	}
	return out
}

// decodeCall validates an action against its P4Info declaration: every
// parameter given once, every value fitting its width, then the program's
// own check.
func decodeCall(ai *actionInfo, a *p4v1.Action) (*Call, error) {
	name := ai.a.GetPreamble().GetName()
	c := &Call{info: ai, args: make([][]byte, len(ai.params))}
	for _, p := range a.GetParams() {
		i, ok := ai.index[p.GetParamId()]
		if !ok {
			return nil, errf(codes.InvalidArgument, "action %s has no parameter with id %d", name, p.GetParamId())
		}
		if c.args[i] != nil {
			return nil, errf(codes.InvalidArgument, "action %s: parameter %q given twice", name, ai.params[i].GetName())
		}
		v, err := CanonicalBits(p.GetValue(), int(ai.params[i].GetBitwidth()))
		if err != nil {
			return nil, prefix(err, "action %s: parameter %q", name, ai.params[i].GetName())
		}
		c.args[i] = v
	}
	for i, v := range c.args {
		if v == nil {
			return nil, errf(codes.InvalidArgument, "action %s: parameter %q missing", name, ai.params[i].GetName())
		}
	}
	if ai.check != nil {
		if err := ai.check(c); err != nil {
			return nil, prefix(err, "action %s", name)
		}
	}
	return c, nil
}
