package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strconv"
)

// bound is a numeric keyword's value, exact, with its int64 form for the common case of integers.
type bound struct {
	r     *big.Rat
	i     int64
	isInt bool // r fits i
	text  string
}

func newBound(v any) (*bound, error) {
	n, ok := normalize(v).(json.Number)
	if !ok {
		return nil, errors.New("not a number")
	}
	r, ok := rat(n)
	if !ok {
		return nil, errors.New("not a representable number")
	}
	b := &bound{r: r, text: ratString(r)}
	if r.IsInt() && r.Num().IsInt64() {
		b.i, b.isInt = r.Num().Int64(), true
	}
	return b, nil
}

// cmp compares n with the bound: -1, 0 or +1; ok is false when n has no exact value.
func (b *bound) cmp(n json.Number, nr **big.Rat) (int, bool) {
	if b.isInt && *nr == nil {
		if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
			switch {
			case i < b.i:
				return -1, true
			case i > b.i:
				return 1, true
			}
			return 0, true
		}
	}
	if *nr == nil {
		r, ok := rat(n)
		if !ok {
			return 0, false
		}
		*nr = r
	}
	return (*nr).Cmp(b.r), true
}

// isInteger reports whether a JSON number has an integer value (1.0 and 1e3 do).
func isInteger(n json.Number) bool {
	if _, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return true
	}
	r, ok := rat(n)
	return ok && r.IsInt()
}

func (s *Schema) validateNumber(n json.Number, path []string) *Error {
	if s.minimum == nil && s.maximum == nil && s.exclusiveMinimum == nil && s.exclusiveMaximum == nil {
		return nil
	}
	var nr *big.Rat
	check := func(b *bound, op string, bad func(int) bool) *Error {
		if b == nil {
			return nil
		}
		c, ok := b.cmp(n, &nr)
		if !ok {
			return &Error{Path: clonePath(path), Message: "number out of the range this API accepts"}
		}
		if bad(c) {
			return &Error{Path: clonePath(path), Message: fmt.Sprintf("must be %s %s, got %s", op, b.text, numberText(n, nr))}
		}
		return nil
	}
	if err := check(s.minimum, ">=", func(c int) bool { return c < 0 }); err != nil {
		return err
	}
	if err := check(s.maximum, "<=", func(c int) bool { return c > 0 }); err != nil {
		return err
	}
	if err := check(s.exclusiveMinimum, ">", func(c int) bool { return c <= 0 }); err != nil {
		return err
	}
	return check(s.exclusiveMaximum, "<", func(c int) bool { return c >= 0 })
}

func clonePath(path []string) []string { return append([]string(nil), path...) }

// numberText prints a client's number plainly: as sent when short, else its exact value when that
// is an integer of at most 64 bits, else the nearest float64.
func numberText(n json.Number, r *big.Rat) string {
	if len(n) <= 24 {
		return string(n)
	}
	if r == nil {
		var ok bool
		if r, ok = rat(n); !ok {
			return string(n[:24]) + "..."
		}
	}
	return ratString(r)
}

// ratString prints an exact number: an integer in full unless it is very long, else the nearest
// float64.
func ratString(r *big.Rat) string {
	if r.IsInt() && r.Num().BitLen() <= 64 {
		return r.Num().String()
	}
	f, _ := r.Float64()
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// equal is JSON equality: numbers by value (1 equals 1.0), objects regardless of key order.
func equal(a, b any) bool {
	switch a := a.(type) {
	case nil:
		return b == nil
	case bool:
		b, ok := b.(bool)
		return ok && a == b
	case string:
		b, ok := b.(string)
		return ok && a == b
	case json.Number:
		b, ok := b.(json.Number)
		if !ok {
			return false
		}
		if a == b {
			_, ok := rat(a)
			return ok
		}
		ra, ok1 := rat(a)
		rb, ok2 := rat(b)
		return ok1 && ok2 && ra.Cmp(rb) == 0
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !equal(a[i], b[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, va := range a {
			vb, ok := b[k]
			if !ok || !equal(va, vb) {
				return false
			}
		}
		return true
	}
	return false
}
