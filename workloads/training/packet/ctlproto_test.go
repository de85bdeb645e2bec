package packet

import (
	"bytes"
	"errors"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/tracebed/tracebed/emulator"
)

func ctlSamples() []ctlMsg {
	a := func(s string) emulator.Addr { return netip.MustParseAddrPort(s) }
	peers := []emulator.Addr{a("10.0.0.1:41000"), a("10.0.0.2:41000"), a("10.0.0.3:41000")}
	return []ctlMsg{
		{Type: msgLaunch, Job: 7, Rank: 2, Launch: launchBody{K: 64, Iterations: 20, Elements: 34000, Compute: 84 * time.Millisecond,
			Jitter: 0.02, Seed: 1, Timeout: 46 * time.Millisecond, RingTimeout: 40 * time.Millisecond, RingWindow: 36, Peers: peers}},
		{Type: msgLaunchAck, Job: 7, Rank: 2},
		{Type: msgReady, Job: 1 << 31, Rank: 0, Round: 19},
		{Type: msgGrant, Job: 7, Rank: 1, Round: 3, Mode: grantRing},
		{Type: msgGrant, Job: 7, Rank: 1, Round: 3, Mode: grantPool, SwJob: 5, Window: 10, Target: a("10.255.0.1:48864")},
		{Type: msgGrant, Job: 7, Rank: 1, Round: 3, Mode: grantShared, SwJob: 1023, Window: 20, Target: a("10.255.0.1:48864")},
		{Type: msgDone, Job: 7, Rank: 3, Round: 4, At: 1234567 * time.Microsecond},
		{Type: msgDone, Job: 7, Rank: 3, Round: 19, At: time.Second, Last: true, Err: "value 3 of the all-reduced gradient is 1, want 2"},
		{Type: msgDoneAck, Job: 7, Rank: 3, Round: 4},
		{Type: msgPSAdd, Job: 7, PS: psBody{SwJob: 3, Elements: 34000, K: 64, Multicast: a("10.255.0.1:48864"), Workers: peers}},
		{Type: msgPSAdd, Job: 7, PS: psBody{SwJob: 3, Elements: 34000, K: 64, Flags: psRepublish | psRemap, Window: 12, Size: 840, Multicast: a("10.255.0.1:48864"), Workers: peers}},
		{Type: msgGrant, Job: 7, Rank: 1, Round: 3, Mode: grantRemap, SwJob: 2, Window: 20, Target: a("10.255.0.1:48864")},
		{Type: msgPSRemove, Job: 7, PS: psBody{SwJob: 3}},
		{Type: msgPSAck, Job: 7, Round: uint32(msgPSAdd), PS: psBody{SwJob: 3}},
	}
}

// TestCtlRoundTrip encodes every kind of control message and decodes it
// back.
func TestCtlRoundTrip(t *testing.T) {
	for _, m := range ctlSamples() {
		b := appendCtl(nil, &m)
		got, err := parseCtl(b)
		if err != nil {
			t.Errorf("%s: %v", m.Type, err)
			continue
		}
		if m.Type == msgGrant && m.Mode == grantRing {
			m.Target = netip.AddrPortFrom(netip.AddrFrom4([4]byte{}), 0) // an invalid address travels as zeros
		}
		if !reflect.DeepEqual(got, m) {
			t.Errorf("%s: decoded %+v, want %+v", m.Type, got, m)
		}
	}
}

// TestCtlRejects checks that the decoder refuses what it must.
func TestCtlRejects(t *testing.T) {
	launch := appendCtl(nil, &ctlSamples()[0])
	grant := appendCtl(nil, &ctlSamples()[4])
	done := appendCtl(nil, &ctlSamples()[7])
	mod := func(b []byte, i int, v byte) []byte { c := bytes.Clone(b); c[i] = v; return c }
	for _, tt := range []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"short header", launch[:11]},
		{"magic", mod(launch, 0, 0xC6)},
		{"unknown type", mod(launch, 1, 0)},
		{"type beyond", mod(launch, 1, byte(numMsgTypes))},
		{"launch truncated", launch[:len(launch)-1]},
		{"launch trailing byte", append(bytes.Clone(launch), 0)},
		{"launch rank beyond workers", mod(launch, 6, 3)},
		{"launch no workers", func() []byte { b := bytes.Clone(launch[:ctlHeaderLen+55]); b[ctlHeaderLen+54] = 0; return b }()},
		{"launch k 0", mod(mod(launch, ctlHeaderLen, 0), ctlHeaderLen+1, 0)},
		{"grant mode", mod(grant, ctlHeaderLen, 4)},
		{"grant window 0", mod(mod(mod(mod(grant, ctlHeaderLen+3, 0), ctlHeaderLen+4, 0), ctlHeaderLen+5, 0), ctlHeaderLen+6, 0)},
		{"grant short", grant[:len(grant)-1]},
		{"done flags", mod(done, ctlHeaderLen+8, 2)},
		{"done error length", mod(done, ctlHeaderLen+9, 0xFF)},
		{"ready with body", append(appendCtl(nil, &ctlMsg{Type: msgReady}), 1)},
		{"ps-add flags", func() []byte { b := appendCtl(nil, &ctlSamples()[10]); b[len(b)-9] = 4; return b }()},
		{"ps-add extension without flags", func() []byte { b := appendCtl(nil, &ctlSamples()[10]); b[len(b)-9] = 0; return b }()},
		{"ps-add remap without a window", func() []byte {
			m := ctlSamples()[10]
			m.PS.Window = 0
			return appendCtl(nil, &m)
		}()},
		{"ps-remove switch job", append(appendCtl(nil, &ctlMsg{Type: msgReady})[:ctlHeaderLen], 0xFF, 0xFF)},
	} {
		if tt.name == "ps-remove switch job" {
			tt.b[1] = byte(msgPSRemove)
		}
		if _, err := parseCtl(tt.b); !errors.Is(err, errCtlMalformed) {
			t.Errorf("%s: error %v, want malformed", tt.name, err)
		}
	}
}

// FuzzParseCtl: the control decoder never panics, and whatever it accepts
// encodes back to the same bytes.
func FuzzParseCtl(f *testing.F) {
	for _, m := range ctlSamples() {
		f.Add(appendCtl(nil, &m))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseCtl(b)
		if err != nil {
			return
		}
		if m.Type == msgGrant && m.Mode == grantRing && m.Target.Addr().IsUnspecified() {
			return // any target bytes decode; the ring ignores them
		}
		if out := appendCtl(nil, &m); !bytes.Equal(out, b) {
			t.Fatalf("re-encoding %x gave %x", b, out)
		}
	})
}
