package inasched

import (
	"errors"
	"strings"
	"testing"
)

func TestRegistry(t *testing.T) {
	r := NewRegistry()
	np := func() Params { return &NoParams{} }
	for _, name := range []string{"b", "a"} {
		if err := r.Register(Policy{Name: name, Params: np}); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Register(Policy{Name: "a", Params: np}); err == nil {
		t.Error("registered a twice")
	}
	if err := r.Register(Policy{Name: "c"}); err == nil {
		t.Error("registered a policy without parameters")
	}
	if got := strings.Join(r.Names(), ","); got != "b,a" {
		t.Errorf("names %s, want registration order b,a", got)
	}
	if _, err := r.Lookup("zz"); err == nil || !strings.Contains(err.Error(), `"zz" is not an INA policy; want one of b, a`) {
		t.Errorf("unknown name: %v", err)
	}
	if p, err := r.Lookup("a"); err != nil || p.Name != "a" {
		t.Errorf("lookup a: %v %v", p, err)
	}
	var pe *ParamError
	if err := ParamErrorf("x", "bad %d", 3); !errors.As(err, &pe) || pe.Field != "x" || err.Error() != "x: bad 3" {
		t.Errorf("param error %v", err)
	}
}
