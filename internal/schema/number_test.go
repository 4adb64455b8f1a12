package schema

import (
	"encoding/json"
	"math/big"
	"testing"
)

// ratOf is math/big's reading of a JSON number: the reference decimal must agree with.
func ratOf(s string) (*big.Rat, bool) { return new(big.Rat).SetString(s) }

var decimalSeeds = []string{
	"0", "-0", "0.0", "1", "1.0", "10", "1e3", "1E+3", "1.5", "-1.5", "0.001", "1e-3", "100e-2", "120e-1",
	"1e400", "1e999999", "1e1000000", "1e1000001", "1.0e1000000", "1e-1000000", "1.0e-1000000",
	"123456789012345678901234567890", "9223372036854775808", "-9223372036854775809", "3600.0000000000000001",
	"0.99999999999999999999", "1e-300", "1e19", "1e-20", "9.99e18",
}

// checkDecimal: parseDecimal accepts exactly what math/big accepts, finds integers as it does, and
// compares with every bound as it does.
func checkDecimal(t *testing.T, s string, bounds []*bound) {
	r, want := ratOf(s)
	d, ok := parseDecimal(json.Number(s))
	if ok != want {
		t.Fatalf("%s: parsed %v, math/big %v", s, ok, want)
	}
	if !ok {
		return
	}
	if got := isInteger(json.Number(s)); got != r.IsInt() {
		t.Errorf("%s: integer %v, math/big %v", s, got, r.IsInt())
	}
	if d.rat().Cmp(r) != 0 {
		t.Errorf("%s: value %s, math/big %s", s, d.rat().RatString(), r.RatString())
	}
	for _, b := range bounds {
		if c, _ := b.cmp(json.Number(s)); c != r.Cmp(b.r) {
			t.Errorf("%s compared with %s: %d, math/big %d", s, ratString(b.r), c, r.Cmp(b.r))
		}
	}
}

func testBounds(t testing.TB) []*bound {
	var out []*bound
	for _, v := range []any{0, 1, -1, 3600, 10485760, 0.5, -2.25, 1e18, 1e-18, 1e30, 1e-30} {
		b, err := newBound(v)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

func TestDecimalAgreesWithMathBig(t *testing.T) {
	bounds := testBounds(t)
	for _, s := range decimalSeeds {
		checkDecimal(t, s, bounds)
	}
	for _, pair := range [][2]string{{"1", "1.0"}, {"100e-2", "1"}, {"-0", "0"}, {"1e400", "10e399"}} {
		if !equal(json.Number(pair[0]), json.Number(pair[1])) {
			t.Errorf("%s and %s: not equal", pair[0], pair[1])
		}
	}
	if equal(json.Number("1e2000000"), json.Number("1e2000000")) {
		t.Error("a number past math/big's limit equals itself: JSON Schema validators built on math/big say no")
	}
}

// FuzzDecimal: for any JSON number, the text-only decimal agrees with math/big.
func FuzzDecimal(f *testing.F) {
	for _, s := range decimalSeeds {
		f.Add(s)
	}
	bounds := testBounds(f)
	f.Fuzz(func(t *testing.T, s string) {
		var n json.Number
		if json.Unmarshal([]byte(s), &n) != nil || len(s) > 64 {
			return // not a JSON number
		}
		if d, ok := parseDecimal(n); ok && (d.exp > 2000 || d.exp < -2000) {
			return // math/big takes seconds on these; the seeds hold the large exponents
		}
		checkDecimal(t, string(n), bounds)
	})
}
