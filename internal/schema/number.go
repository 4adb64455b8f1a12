package schema

import (
	"encoding/json"
	"errors"
	"math/big"
	"strconv"
	"strings"
)

// decimal is the exact value of a JSON number, (-1)^neg × digits × 10^exp, with digits free of leading
// and trailing zeros ("" for zero). It is computed from the text alone, so that a number with an
// exponent of a million costs no more than its few bytes.
type decimal struct {
	neg    bool
	digits string
	exp    int64
}

// maxExp is math/big's limit on the decimal exponent of a number it parses (its exponent minus its
// number of fraction digits): JSON Schema validators built on math/big take no number past it for a
// number, so neither does this one.
const maxExp = 1_000_000

// parseDecimal reads a JSON number (or a Go-formatted one: "1e+21"); ok is false for one past maxExp.
func parseDecimal(n json.Number) (d decimal, ok bool) {
	s := string(n)
	if s, d.neg = strings.CutPrefix(s, "-"); !d.neg {
		s = strings.TrimPrefix(s, "+")
	}
	mant, expText := s, ""
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		mant, expText = s[:i], s[i+1:]
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	if intPart == "" && frac == "" || strings.ContainsFunc(intPart+frac, func(r rune) bool { return r < '0' || r > '9' }) {
		return decimal{}, false
	}
	var exp int64
	if expText != "" {
		e, err := strconv.ParseInt(expText, 10, 64)
		if err != nil {
			return decimal{}, false
		}
		exp = e
	}
	digits := strings.TrimLeft(intPart+frac, "0")
	if digits == "" {
		return decimal{}, true // zero, whatever its exponent, as math/big has it
	}
	if exp > 1<<40 || exp < -1<<40 {
		return decimal{}, false
	}
	exp -= int64(len(frac))
	if exp > maxExp || exp < -maxExp {
		return decimal{}, false
	}
	trimmed := strings.TrimRight(digits, "0")
	d.digits, d.exp = trimmed, exp+int64(len(digits)-len(trimmed))
	return d, true
}

// magnitude is m such that 10^(m-1) <= |d| < 10^m, for a non-zero d.
func (d decimal) magnitude() int64 { return int64(len(d.digits)) + d.exp }

func (d decimal) rat() *big.Rat {
	if d.digits == "" {
		return new(big.Rat)
	}
	r, _ := new(big.Rat).SetString(d.digits + "e" + strconv.FormatInt(d.exp, 10))
	if d.neg {
		r.Neg(r)
	}
	return r
}

func (d decimal) sign() int {
	switch {
	case d.digits == "":
		return 0
	case d.neg:
		return -1
	}
	return 1
}

// bound is a numeric keyword's value, exact, with its int64 form for the common case of integers.
type bound struct {
	r     *big.Rat
	i     int64
	isInt bool // r fits i
	// small: r is 0 or 1e-18 <= |r| <= 1e18, so that a number of a magnitude past ±19 compares to it by
	// its sign alone.
	small bool
}

func newBound(v any) (*bound, error) {
	n, ok := normalize(v).(json.Number)
	if !ok {
		return nil, errors.New("not a number")
	}
	d, ok := parseDecimal(n)
	if !ok {
		return nil, errors.New("not a representable number")
	}
	r := d.rat()
	b := &bound{r: r}
	if r.IsInt() && r.Num().IsInt64() {
		b.i, b.isInt = r.Num().Int64(), true
	}
	abs := new(big.Rat).Abs(r)
	b.small = r.Sign() == 0 || abs.Cmp(big.NewRat(1, 1e18)) >= 0 && abs.Cmp(big.NewRat(1e18, 1)) <= 0
	return b, nil
}

// cmp compares n with the bound: -1, 0 or +1; ok is false when n is past maxExp.
func (b *bound) cmp(n json.Number) (int, bool) {
	if b.isInt {
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
	d, ok := parseDecimal(n)
	if !ok {
		return 0, false
	}
	if b.small && d.sign() != 0 {
		switch m := d.magnitude(); {
		case m > 19: // |d| >= 1e19 > |b|
			return d.sign(), true
		case m < -19 && b.r.Sign() != 0: // 0 < |d| < 1e-20 < |b|
			return -b.r.Sign(), true
		case m < -19: // b is 0
			return d.sign(), true
		}
	}
	return d.rat().Cmp(b.r), true
}

// isInteger reports whether a JSON number has an integer value (1.0 and 1e3 do).
func isInteger(n json.Number) bool {
	if _, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return true
	}
	d, ok := parseDecimal(n)
	return ok && d.exp >= 0
}

func (s *Schema) validateNumber(n json.Number, path []string) *Error {
	check := func(b *bound, op string, bad func(int) bool) *Error {
		if b == nil {
			return nil
		}
		c, ok := b.cmp(n)
		if !ok {
			return &Error{Path: clonePath(path), Message: OutOfRangeMessage}
		}
		if bad(c) {
			return &Error{Path: clonePath(path), Message: BoundMessage(op, b.r, n)}
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

// numberText prints a client's number as sent, cut when long.
func numberText(n json.Number) string {
	if len(n) <= 32 {
		return string(n)
	}
	return string(n[:32]) + "..."
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
		da, ok1 := parseDecimal(a)
		db, ok2 := parseDecimal(b)
		return ok1 && ok2 && da == db
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
