package sandbox_test

import (
	"errors"
	"strconv"
	"testing"

	"github.com/sandboxd/sandbox"
)

func TestParsePort(t *testing.T) {
	for _, s := range []string{"1", "80", "8080", "65535", "10000"} {
		n, err := sandbox.ParsePort(s)
		if err != nil || strconv.Itoa(n) != s {
			t.Errorf("%q: %d, %v", s, n, err)
		}
	}
	for _, s := range []string{"", "0", "00", "02280", "080", "+80", "-80", "80 ", " 80", "65536", "99999", "100000",
		"0x50", "8e1", "٨٠", "80\x00", "1_000", "4294967376"} {
		if n, err := sandbox.ParsePort(s); !errors.Is(err, sandbox.ErrInvalidRequest) {
			t.Errorf("%q accepted as %d", s, n)
		}
	}
}

// FuzzParsePort: a port is accepted exactly when it is its own canonical spelling of 1-65535.
func FuzzParsePort(f *testing.F) {
	for _, s := range []string{"80", "02280", "+80", "65536", "0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := sandbox.ParsePort(s)
		v, aerr := strconv.Atoi(s)
		want := aerr == nil && v >= 1 && v <= 65535 && strconv.Itoa(v) == s
		if (err == nil) != want || (err == nil && n != v) {
			t.Fatalf("%q: %d, %v", s, n, err)
		}
	})
}
