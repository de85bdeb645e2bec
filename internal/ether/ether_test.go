package ether

import "testing"

func TestString(t *testing.T) {
	for _, tc := range []struct {
		m    MAC
		want string
	}{
		{MAC{}, "00:00:00:00:00:00"},
		{MAC{0x02, 0x01, 0xab, 0xcd, 0x00, 0xff}, "02:01:ab:cd:00:ff"},
	} {
		if got := tc.m.String(); got != tc.want {
			t.Errorf("%v: %q, want %q", [6]byte(tc.m), got, tc.want)
		}
	}
}
