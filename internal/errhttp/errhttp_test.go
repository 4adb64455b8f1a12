package errhttp_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/internal/errhttp"
)

// TestEveryClassHasAStatus: each class of the domain's table has its own entry, a 4xx or 5xx, and its
// wrapped sentinel gets the same status; unclassified errors and unknown codes are 500.
func TestEveryClassHasAStatus(t *testing.T) {
	for _, c := range sandbox.ErrorClasses {
		st := errhttp.Status(c.Code)
		if st < 400 || st > 599 || (st == 500 && c.Code != sandbox.CodeInternal) {
			t.Errorf("%s: status %d", c.Code, st)
		}
		if got := errhttp.StatusOf(fmt.Errorf("context: %w", c.Err)); got != st {
			t.Errorf("%v: StatusOf %d, Status %d", c.Err, got, st)
		}
	}
	for _, code := range []sandbox.ErrorCode{sandbox.CodeInternal, "no_such_code", ""} {
		if st := errhttp.Status(code); st != 500 {
			t.Errorf("%q: status %d, want 500", code, st)
		}
	}
	if st := errhttp.StatusOf(errors.New("boom")); st != 500 {
		t.Errorf("unclassified error: status %d, want 500", st)
	}
}
