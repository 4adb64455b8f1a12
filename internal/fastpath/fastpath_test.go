package fastpath

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct{ list, want string }{
		{"", ""}, {"json", "json"}, {" tail , json ", "json,tail"}, {"all", strings.Join(Names, ",")}, {"schema,,", "schema"},
	} {
		p, err := Parse(tc.list)
		if err != nil || p.String() != tc.want {
			t.Errorf("Parse(%q) = %q, %v; want %q", tc.list, p, err, tc.want)
		}
	}
	if _, err := Parse("json,jornal"); err == nil || !strings.Contains(err.Error(), `"jornal"`) {
		t.Errorf("Parse of an unknown name: %v", err)
	}
}

// TestFromEnv: the environment's list, its unknown names passed over.
func TestFromEnv(t *testing.T) {
	t.Setenv(Env, "jornal, json")
	if p := FromEnv(); p.String() != "json" {
		t.Errorf("FromEnv = %q, want json", p)
	}
	t.Setenv(Env, "")
	if p := FromEnv(); len(p) != 0 {
		t.Errorf("FromEnv of nothing = %q", p)
	}
}
