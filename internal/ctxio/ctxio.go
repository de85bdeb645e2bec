// Package ctxio makes reads interruptible: a reader that fails once its
// context is done, so that a command reading a large file (converting a
// memory trace of gigabytes, say) stops on SIGINT within one read.
package ctxio

import (
	"context"
	"io"
)

// Reader returns r, failing with ctx's cause from the first Read after
// ctx is done.
func Reader(ctx context.Context, r io.Reader) io.Reader {
	if ctx == nil || ctx.Done() == nil {
		return r
	}
	return &reader{ctx: ctx, r: r}
}

// ReadCloser is Reader for an io.ReadCloser; Close closes rc.
func ReadCloser(ctx context.Context, rc io.ReadCloser) io.ReadCloser {
	if ctx == nil || ctx.Done() == nil {
		return rc
	}
	return readCloser{Reader: &reader{ctx: ctx, r: rc}, Closer: rc}
}

type reader struct {
	ctx context.Context
	r   io.Reader
}

func (r *reader) Read(p []byte) (int, error) {
	if r.ctx.Err() != nil {
		return 0, context.Cause(r.ctx)
	}
	return r.r.Read(p)
}

type readCloser struct {
	io.Reader
	io.Closer
}
