package p4rt

import (
	"fmt"
	"strings"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
)

// BatchError is the outcome of a Write or Read batch in which some
// elements failed (P4Runtime 1.4.1 §12.3 and §13.3): one error per
// update or query of the batch, in order, nil for those that succeeded.
//
// As an error it reads as its first failure: status.Code and
// status.Convert see that element's code, with "update I: " or "query I: "
// before its message, so a caller that sent one update sees that update's
// error. Status gives the P4Runtime form sent over gRPC: UNKNOWN with one
// p4.v1.Error per element in the details.
type BatchError struct {
	// Kind is "update" (a Write) or "query" (a Read).
	Kind string
	// Errs holds one entry per element of the batch; nil means OK.
	Errs []error
}

// First returns the index of the first failed element, or -1.
func (e *BatchError) First() int {
	for i, err := range e.Errs {
		if err != nil {
			return i
		}
	}
	return -1
}

// Failed returns the number of elements that failed.
func (e *BatchError) Failed() int {
	n := 0
	for _, err := range e.Errs {
		if err != nil {
			n++
		}
	}
	return n
}

// Error lists every failure.
func (e *BatchError) Error() string {
	var b strings.Builder
	for i, err := range e.Errs {
		if err == nil {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("; ")
		}
		st := status.Convert(err)
		fmt.Fprintf(&b, "%s %d: %s: %s", e.Kind, i, st.Code(), st.Message())
	}
	return b.String()
}

// GRPCStatus is the status of the first failure (see the type's comment).
func (e *BatchError) GRPCStatus() *status.Status {
	i := e.First()
	if i < 0 {
		return status.New(codes.OK, "")
	}
	st := status.Convert(e.Errs[i])
	return status.Newf(st.Code(), "%s %d: %s", e.Kind, i, st.Message())
}

// Status returns the P4Runtime status of the batch: UNKNOWN, with one
// p4.v1.Error per element (canonical code OK and nothing else for those
// that succeeded).
func (e *BatchError) Status() *status.Status {
	details := make([]*anypb.Any, len(e.Errs))
	for i, err := range e.Errs {
		pe := &p4v1.Error{}
		if err != nil {
			st := status.Convert(err)
			pe.CanonicalCode, pe.Message = int32(st.Code()), st.Message()
		}
		details[i], _ = anypb.New(pe) // a p4.v1.Error always marshals
	}
	msg := fmt.Sprintf("%d of %d %ss failed", e.Failed(), len(e.Errs), e.Kind)
	return status.FromProto(&rpcstatus.Status{Code: int32(codes.Unknown), Message: msg, Details: details})
}

// UpdateError unpacks a P4Runtime batch status (UNKNOWN with p4.v1.Error
// details, as a server answers a Write or Read in which some elements
// failed) into a *BatchError of kind "update". Other errors are returned
// unchanged.
func UpdateError(err error) error { return batchFromStatus(err, "update") }

func batchFromStatus(err error, kind string) error {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unknown || len(st.Proto().GetDetails()) == 0 {
		return err
	}
	be := &BatchError{Kind: kind, Errs: make([]error, len(st.Proto().GetDetails()))}
	for i, d := range st.Proto().GetDetails() {
		var pe p4v1.Error
		if d.UnmarshalTo(&pe) != nil {
			return err // not a P4Runtime batch status
		}
		if c := codes.Code(pe.GetCanonicalCode()); c != codes.OK {
			be.Errs[i] = status.Error(c, pe.GetMessage())
		}
	}
	if be.First() < 0 {
		return err
	}
	return be
}
