// Package p4rt is how tracebed's controllers talk P4Runtime
// (github.com/p4lang/p4runtime, p4/v1) to a switch, on every substrate.
//
// A Device is a programmable data plane seen from the control plane: the Go
// pipelines of p4/ implement it. A Client is what controllers use: the
// in-process client (Local) calls a Device directly on the sim substrate;
// the gRPC client speaks to the Go switch's P4Runtime server or to bmv2's
// simple_switch_grpc on the netns substrate. Controllers look every id up by
// name in the P4Info, so the same controller code drives all of them.
package p4rt

import (
	"context"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Device is a data plane programmable through P4Runtime entities. A Go
// pipeline implements it with a Target, which it builds from its P4Info
// and its bindings.
//
// Errors are gRPC status errors (google.golang.org/grpc/status) with the
// codes the P4Runtime specification gives: InvalidArgument for malformed
// entities, OutOfRange for values wider than their field, NotFound for a
// missing entry, AlreadyExists for an INSERT of an existing key,
// PermissionDenied for an action out of its scope, Unimplemented for
// entity types the device lacks. A Device never panics on a malformed
// message.
//
// A Device is not safe for concurrent use with its packet path: on sim both
// run on the event loop; the Go switch serializes control-plane calls with
// packet processing.
type Device interface {
	// P4Info describes the device's tables, actions, registers, counters.
	P4Info() *p4configv1.P4Info
	// Write applies a batch of updates as P4Runtime's CONTINUE_ON_ERROR
	// atomicity requires: every update is attempted, in order. If some
	// fail, the error is a *BatchError with each update's status.
	Write(updates []*p4v1.Update) error
	// Read calls yield for every entity matching the (possibly wildcard)
	// query entity, as P4Runtime Read does.
	Read(query *p4v1.Entity, yield func(*p4v1.Entity) error) error
}

// Client is a controller's connection to one switch.
type Client interface {
	// P4Info is the pipeline description the switch runs.
	P4Info() *p4configv1.P4Info
	// Write sends one WriteRequest with the given updates. Every update is
	// attempted; if some fail, the error is a *BatchError, which reads as
	// the first failure (status.Code gives that update's code).
	Write(ctx context.Context, updates ...*p4v1.Update) error
	// Read returns every entity matching the queries. If some queries
	// fail, it returns the entities of the others and a *BatchError.
	Read(ctx context.Context, queries ...*p4v1.Entity) ([]*p4v1.Entity, error)
}

// Local returns an in-process Client for d (the sim substrate's control
// channel). Calls go straight to the device; the caller must respect the
// device's concurrency rule.
func Local(d Device) Client { return local{d} }

type local struct{ d Device }

func (l local) P4Info() *p4configv1.P4Info { return l.d.P4Info() }

func (l local) Write(ctx context.Context, updates ...*p4v1.Update) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return l.d.Write(updates)
}

func (l local) Read(ctx context.Context, queries ...*p4v1.Entity) ([]*p4v1.Entity, error) {
	return ReadBatch(ctx, l.d, queries, func(e *p4v1.Entity) error { return nil })
}

// ReadBatch runs a Read batch on d as P4Runtime §13.3 describes: every
// query is answered; the entities of those that succeed are returned (and
// passed to each, which may stop the read by failing), and if some fail
// the error is a *BatchError of kind "query" with each query's status.
func ReadBatch(ctx context.Context, d Device, queries []*p4v1.Entity, each func(*p4v1.Entity) error) ([]*p4v1.Entity, error) {
	var out []*p4v1.Entity
	var errs []error
	for i, q := range queries {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		n := len(out)
		var stop error
		err := d.Read(q, func(e *p4v1.Entity) error {
			if stop = each(e); stop != nil {
				return stop
			}
			out = append(out, e)
			return nil
		})
		if stop != nil {
			return out, stop
		}
		if err != nil {
			out = out[:n] // a failed query returns nothing
			if errs == nil {
				errs = make([]error, len(queries))
			}
			errs[i] = err
		}
	}
	if errs != nil {
		return out, &BatchError{Kind: "query", Errs: errs}
	}
	return out, nil
}

// CheckExistence applies P4Runtime's rule for an update of an entity that
// does or does not exist yet: an INSERT of an existing one fails with
// AlreadyExists, a MODIFY or DELETE of a missing one with NotFound. what
// names the entity in the message ("ECMP member 3" → "ECMP member 3
// exists", "no ECMP member 3").
func CheckExistence(typ p4v1.Update_Type, exists bool, what string) error {
	switch {
	case typ == p4v1.Update_INSERT && exists:
		return status.Errorf(codes.AlreadyExists, "%s exists", what)
	case typ != p4v1.Update_INSERT && !exists:
		return status.Errorf(codes.NotFound, "no %s", what)
	}
	return nil
}
