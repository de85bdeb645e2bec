package ctxio

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestReaderStopsWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	r := Reader(ctx, strings.NewReader(strings.Repeat("x", 100)))
	buf := make([]byte, 10)
	if n, err := r.Read(buf); n != 10 || err != nil {
		t.Fatalf("read %d, %v", n, err)
	}
	stop := errors.New("interrupted by SIGINT")
	cancel(stop)
	if _, err := io.ReadAll(r); !errors.Is(err, stop) {
		t.Errorf("read after cancel: %v, want %v", err, stop)
	}
	if Reader(context.Background(), r) != r {
		t.Error("a context that is never done wraps the reader")
	}
}
