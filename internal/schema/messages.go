package schema

import (
	"encoding/json"
	"fmt"
	"math/big"
	"strconv"
	"strings"
)

// The wording of every rule a value can break, one function per rule: this package's validator and the
// library path (package plain) both say a broken rule with them, so the API's 400s read the same
// whichever validated the request.

// TypeMessage: v is not of one of the types want names, in the schema's order.
func TypeMessage(v any, want []string) string {
	return "got " + TypeName(v) + ", want " + strings.Join(want, " or ")
}

// ConstMessage: the value is not c (a JSON value as encoding/json with UseNumber decodes it, or YAML's).
func ConstMessage(c any) string { return "value must be " + jsonText(normalize(c)) }

// EnumMessage: the value is none of list.
func EnumMessage(list []any) string {
	texts := make([]string, len(list))
	for i, e := range list {
		texts[i] = jsonText(normalize(e))
	}
	return "value must be one of " + strings.Join(texts, ", ")
}

// NotMessage says what the schema not, found at ptr, forbids: "a and b cannot both be set" for the
// "not: {required: [a, b]}" shape, else the generic rule.
func NotMessage(not any, ptr string) string {
	m, _ := not.(map[string]any)
	onlyRequired := len(m) > 0
	for k := range m {
		if k != "required" && !annotations[k] && !strings.HasPrefix(k, "x-") {
			onlyRequired = false
		}
	}
	var req []string
	if list, ok := m["required"].([]any); ok && onlyRequired {
		for _, e := range list {
			if name, ok := e.(string); ok {
				req = append(req, name)
			}
		}
	}
	if len(req) > 1 {
		return strings.Join(req[:len(req)-1], ", ") + " and " + req[len(req)-1] + " cannot both be set"
	}
	return "matches a schema it must not (" + ptr + ")"
}

// MinLengthMessage: a string of got characters, fewer than want.
func MinLengthMessage(got, want int) string {
	return fmt.Sprintf("minLength: got %d characters, want at least %d", got, want)
}

// PatternMessage: a string that does not match pattern.
func PatternMessage(pattern string) string { return "does not match pattern " + strconv.Quote(pattern) }

// BoundMessage: n breaks the numeric keyword op (">=", "<=", ">", "<") of bound.
func BoundMessage(op string, bound *big.Rat, n json.Number) string {
	return fmt.Sprintf("must be %s %s, got %s", op, ratString(bound), numberText(n))
}

// OutOfRangeMessage: a number past the exponent a numeric keyword can compare (see maxExp).
const OutOfRangeMessage = "number out of the range this API accepts"

// MinItemsMessage: an array of got items, fewer than want.
func MinItemsMessage(got, want int) string {
	return fmt.Sprintf("minItems: got %d items, want at least %d", got, want)
}

// UniqueItemsMessage: items i and j (i < j) of an array are equal.
func UniqueItemsMessage(i, j int) string {
	return fmt.Sprintf("uniqueItems: items %d and %d are equal", i, j)
}

// RequiredMessage: an object lacks the required members missing, in the schema's order.
func RequiredMessage(missing []string) string {
	return "missing required " + plural(len(missing), "field ", "fields ") + quoteAll(missing)
}

// UnknownMessage: an object has members its schema does not allow, sorted.
func UnknownMessage(unknown []string) string {
	return "unknown " + plural(len(unknown), "field ", "fields ") + quoteAll(unknown)
}

// KeyMessage: an object's key breaks its propertyNames schema with message.
func KeyMessage(key, message string) string { return "key " + strconv.Quote(key) + ": " + message }

// TypeName is the JSON type of a decoded value, as a message names it: a number is an integer when its
// value is one (1.0 is).
func TypeName(v any) string { return typeName(v) }

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func quoteAll(list []string) string {
	q := make([]string, len(list))
	for i, s := range list {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}

// jsonText is an enum or const value as JSON.
func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
