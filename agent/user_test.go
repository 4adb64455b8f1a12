package agent

import (
	"fmt"
	"testing"
)

func TestParseUser(t *testing.T) {
	for in, want := range map[string]string{"": "<nil>", "1000:1001": "1000 1001 []", "0:0:": "0 0 []", "5:6:7,8": "5 6 [7 8]"} {
		c, err := parseUser(in)
		got := "<nil>"
		if c != nil {
			got = fmt.Sprintf("%d %d %v", c.Uid, c.Gid, c.Groups)
		}
		if err != nil || got != want {
			t.Errorf("parseUser(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{"1000", "a:b", "1:2:3:4", "1:2:x", "-1:0", "4294967296:0"} {
		if _, err := parseUser(bad); err == nil {
			t.Errorf("parseUser(%q) accepted", bad)
		}
	}
}
