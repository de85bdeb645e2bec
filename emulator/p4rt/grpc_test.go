package p4rt

import (
	"errors"
	"testing"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
)

func TestTarget(t *testing.T) {
	for in, want := range map[string]string{
		"/run/tracebed/tb-x/tor.sock": "unix:///run/tracebed/tb-x/tor.sock",
		"./tor.sock":                  "unix://./tor.sock",
		"127.0.0.1:9559":              "127.0.0.1:9559",
		"unix:///a.sock":              "unix:///a.sock",
	} {
		if got := DialTarget(in); got != want {
			t.Errorf("DialTarget(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestUpdateError(t *testing.T) {
	detail := func(c codes.Code, msg string) *anypb.Any {
		a, _ := anypb.New(&p4v1.Error{CanonicalCode: int32(c), Message: msg})
		return a
	}
	batch := status.ErrorProto(&rpcstatus.Status{Code: int32(codes.Unknown), Message: "batch", Details: []*anypb.Any{
		detail(codes.OK, ""), detail(codes.AlreadyExists, "exists"), detail(codes.Aborted, "not attempted")}})
	err := UpdateError(batch)
	if status.Code(err) != codes.AlreadyExists || status.Convert(err).Message() != "update 1: exists" {
		t.Errorf("UpdateError(batch) = %v", err)
	}
	plain := status.Error(codes.PermissionDenied, "no")
	if UpdateError(plain) != plain {
		t.Error("a plain status changed")
	}
	other := errors.New("x")
	if UpdateError(other) != other || UpdateError(nil) != nil {
		t.Error("non-status errors changed")
	}
	// UNKNOWN without details stays as it is.
	u := status.Error(codes.Unknown, "?")
	if UpdateError(u) != u {
		t.Error("UNKNOWN without details changed")
	}
}
