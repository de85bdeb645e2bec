package p4rt

import (
	"testing"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestCheckExistence(t *testing.T) {
	tests := []struct {
		typ    p4v1.Update_Type
		exists bool
		code   codes.Code
		msg    string
	}{
		{p4v1.Update_INSERT, false, codes.OK, ""},
		{p4v1.Update_INSERT, true, codes.AlreadyExists, "group 3 exists"},
		{p4v1.Update_MODIFY, true, codes.OK, ""},
		{p4v1.Update_MODIFY, false, codes.NotFound, "no group 3"},
		{p4v1.Update_DELETE, true, codes.OK, ""},
		{p4v1.Update_DELETE, false, codes.NotFound, "no group 3"},
	}
	for _, tt := range tests {
		err := CheckExistence(tt.typ, tt.exists, "group 3")
		if s := status.Convert(err); s.Code() != tt.code || s.Message() != tt.msg {
			t.Errorf("%v, exists %v: %v; want %v %q", tt.typ, tt.exists, err, tt.code, tt.msg)
		}
	}
}
