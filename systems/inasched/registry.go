package inasched

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Policy is a scheduler as the experiment kinds know it, in the style of
// containerlab's node registry: a name, a one-line description, and its
// parameters. Each policy package has a Register function that adds its
// policies to a Registry; the list is assembled in one place (the kind).
type Policy struct {
	// Name is what a spec's policies list names.
	Name string
	// Doc says in a line what the policy does.
	Doc string
	// Params returns the policy's parameters at their defaults: a pointer
	// to a struct with yaml tags, into which a spec's policy entry is
	// decoded (strictly: an unknown key is an error naming it).
	Params func() Params
}

// Params are a policy's parameters, decoded from a spec.
type Params interface {
	// Check validates the parameters. Its errors name the field at fault
	// (*ParamError), so that the spec's error points at the line.
	Check() error
	// Factory returns the scheduler factory for a network.
	Factory(Network) (Factory, error)
}

// Network is what a policy may learn about the network it will run on
// when it is built (the same estimates the substrates use).
type Network interface {
	// Window is the line-rate window, in aggregators, of the longest
	// aggregation round trip a job can have on the network: what a
	// static partition must hold for any job to stream at line rate.
	Window() int
}

// ParamError is an invalid policy parameter.
type ParamError struct {
	Field string // the yaml key
	Err   error
}

func (e *ParamError) Error() string { return e.Field + ": " + e.Err.Error() }

func (e *ParamError) Unwrap() error { return e.Err }

// ParamErrorf returns a *ParamError about field.
func ParamErrorf(field, format string, args ...any) error {
	return &ParamError{Field: field, Err: fmt.Errorf(format, args...)}
}

// NoParams is the parameter set of a policy without parameters.
type NoParams struct {
	// New builds the scheduler.
	New Factory `yaml:"-"`
}

// Check implements Params.
func (NoParams) Check() error { return nil }

// Factory implements Params.
func (p *NoParams) Factory(Network) (Factory, error) { return p.New, nil }

// Registry holds the policies a kind can run, by name.
type Registry struct {
	byName map[string]Policy
	names  []string
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{byName: map[string]Policy{}} }

// Register adds a policy. Registering a name twice, or a policy without
// name or parameters, is an error.
func (r *Registry) Register(p Policy) error {
	switch {
	case p.Name == "" || p.Params == nil:
		return errors.New("inasched: a policy needs a name and parameters")
	case r.byName[p.Name].Name != "":
		return fmt.Errorf("inasched: policy %q registered twice", p.Name)
	}
	r.byName[p.Name] = p
	r.names = append(r.names, p.Name)
	return nil
}

// Lookup returns the policy called name; for an unknown name the error
// lists the known ones.
func (r *Registry) Lookup(name string) (Policy, error) {
	p, ok := r.byName[name]
	if !ok {
		return Policy{}, fmt.Errorf("%q is not an INA policy; want one of %s", name, strings.Join(r.Names(), ", "))
	}
	return p, nil
}

// Names returns the registered names in registration order.
func (r *Registry) Names() []string { return slices.Clone(r.names) }
