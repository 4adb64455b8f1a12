package main

import "testing"

func TestParseForward(t *testing.T) {
	for in, want := range map[string]struct {
		local  string
		remote int
	}{"8080:80": {"8080", 80}, "3000": {"3000", 3000}, "0:22": {"0", 22}} {
		l, r, err := parseForward(in)
		if err != nil || l != want.local || r != want.remote {
			t.Errorf("%s: %s %d %v", in, l, r, err)
		}
	}
	for _, bad := range []string{"8080:02280", "+80", "80:", ":80", "65536", "a:80", "80:80:80"} {
		if _, _, err := parseForward(bad); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}
