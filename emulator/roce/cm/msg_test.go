package cm

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

func TestMsgRoundTrip(t *testing.T) {
	m := Msg{Type: TypeREP, Reason: 0, LocalID: 7, RemoteID: 9, Service: 0x1122334455667788, QPN: 0xabcdef, PSN: 0x123456,
		MTU: 4096, RespRes: 4, InitDepth: 2, RetryCnt: 7, RNRRetry: 6, Timeout: 14,
		Region: Region{Addr: 0x7f0000001000, RKey: 0x107, Length: 1 << 20}, Private: []byte("hello")}
	b := m.Append(nil)
	if len(b) != HeaderLen+5 {
		t.Fatalf("length %d", len(b))
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Private) != "hello" {
		t.Fatalf("private %q", got.Private)
	}
	got.Private, m.Private = nil, nil
	if !reflect.DeepEqual(got, m) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, m)
	}
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"short", b[:HeaderLen-1]},
		{"magic", append([]byte{'X'}, b[1:]...)},
		{"type", func() []byte { c := bytes.Clone(b); c[4] = 9; return c }()},
		{"private-length", func() []byte { c := bytes.Clone(b); c[7] = 6; return c }()},
		{"trailing", append(bytes.Clone(b), 0)},
		{"qpn", func() []byte { c := bytes.Clone(b); c[24] = 1; return c }()},
	} {
		if _, err := Decode(tc.b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", tc.name, err)
		}
	}
}

// FuzzDecode decodes arbitrary datagrams: never a panic, and a message
// that decodes encodes back to the same bytes.
func FuzzDecode(f *testing.F) {
	f.Add((&Msg{Type: TypeREQ, Service: 1, QPN: 17, PSN: 5, MTU: 1024, Private: []byte{1, 2}}).Append(nil))
	f.Add((&Msg{Type: TypeDREQ}).Append(nil))
	f.Add([]byte("RCM\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			return
		}
		if out := m.Append(nil); !bytes.Equal(out, b) {
			t.Fatalf("re-encoding differs:\n% x\n% x", out, b)
		}
	})
}
