// Package jsondoc parses JSON documents into the generic values encoding/json gives an interface{}
// (with UseNumber), in one pass: the parser of the daemon's request validator and of the client's
// large answers, bodies that can hold megabytes in one string.
package jsondoc

import (
	"encoding/json"
	"errors"
	"fmt"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Decode parses a JSON document into the same values as encoding/json decoding into an interface{}
// with UseNumber (map[string]any with the last of duplicate keys, []any, string, json.Number, bool, nil;
// invalid UTF-8 and lone surrogates become U+FFFD), and nothing but white space may follow the value.
// It exists for speed: a body of megabytes is mostly one string (a file's base64, a command's output),
// which encoding/json scans twice and then copies rune by rune, and which Decode takes in one pass,
// copied once. FuzzDecode holds it to encoding/json on any input.
func Decode(data []byte) (any, error) {
	v, rest, err := DecodeFirst(data)
	if err != nil {
		return nil, err
	}
	if !Blank(rest) {
		d := decoder{data: data, i: len(data) - len(rest)}
		d.space()
		return nil, d.errorf("after the top-level value")
	}
	return v, nil
}

// DecodeFirst is Decode of the first value in data, as a json.Decoder's Decode takes it: whatever
// follows the value is returned as rest, unread.
func DecodeFirst(data []byte) (v any, rest []byte, err error) {
	d := decoder{data: data}
	d.space()
	if v, err = d.value(0); err != nil {
		return nil, nil, err
	}
	return v, data[d.i:], nil
}

// Blank reports whether b is only JSON white space.
func Blank(b []byte) bool {
	d := decoder{data: b}
	d.space()
	return d.i == len(b)
}

// maxDepth is encoding/json's bound on nesting.
const maxDepth = 10000

type decoder struct {
	data []byte
	i    int
}

var errDepth = errors.New("exceeded max depth")

func (d *decoder) errorf(context string) error {
	if d.i >= len(d.data) {
		return errors.New("unexpected end of JSON input")
	}
	return fmt.Errorf("invalid character %q at offset %d %s", d.data[d.i], d.i, context)
}

func (d *decoder) space() {
	for d.i < len(d.data) {
		switch d.data[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *decoder) value(depth int) (any, error) {
	if d.i >= len(d.data) {
		return nil, d.errorf("")
	}
	switch c := d.data[d.i]; {
	case c == '{':
		if depth+1 > maxDepth {
			return nil, errDepth
		}
		return d.object(depth + 1)
	case c == '[':
		if depth+1 > maxDepth {
			return nil, errDepth
		}
		return d.array(depth + 1)
	case c == '"':
		return d.str()
	case c == '-' || ('0' <= c && c <= '9'):
		return d.number()
	case c == 't':
		return true, d.literal("true")
	case c == 'f':
		return false, d.literal("false")
	case c == 'n':
		return nil, d.literal("null")
	}
	return nil, d.errorf("looking for the beginning of a value")
}

func (d *decoder) literal(word string) error {
	for k := 0; k < len(word); k++ {
		if d.i >= len(d.data) || d.data[d.i] != word[k] {
			return d.errorf("in literal " + word)
		}
		d.i++
	}
	return nil
}

func (d *decoder) object(depth int) (any, error) {
	d.i++ // '{'
	m := map[string]any{}
	d.space()
	if d.i < len(d.data) && d.data[d.i] == '}' {
		d.i++
		return m, nil
	}
	for {
		if d.i >= len(d.data) || d.data[d.i] != '"' {
			return nil, d.errorf("looking for the beginning of an object key")
		}
		k, err := d.str()
		if err != nil {
			return nil, err
		}
		d.space()
		if d.i >= len(d.data) || d.data[d.i] != ':' {
			return nil, d.errorf("after an object key")
		}
		d.i++
		d.space()
		v, err := d.value(depth)
		if err != nil {
			return nil, err
		}
		m[k] = v
		more, err := d.next('}', "after an object member")
		if err != nil {
			return nil, err
		}
		if !more {
			return m, nil
		}
	}
}

func (d *decoder) array(depth int) (any, error) {
	d.i++ // '['
	a := []any{}
	d.space()
	if d.i < len(d.data) && d.data[d.i] == ']' {
		d.i++
		return a, nil
	}
	for {
		v, err := d.value(depth)
		if err != nil {
			return nil, err
		}
		a = append(a, v)
		more, err := d.next(']', "after an array element")
		if err != nil {
			return nil, err
		}
		if !more {
			return a, nil
		}
	}
}

// next takes what follows a member of an object or an array: a comma (more is true) or the closing
// end (more is false); anything else is an error.
func (d *decoder) next(end byte, context string) (more bool, err error) {
	d.space()
	switch {
	case d.i >= len(d.data):
		return false, d.errorf("")
	case d.data[d.i] == ',':
		d.i++
		d.space()
		return true, nil
	case d.data[d.i] == end:
		d.i++
		return false, nil
	}
	return false, d.errorf(context)
}

// number takes a number as JSON writes it and returns its text, as UseNumber does.
func (d *decoder) number() (any, error) {
	start := d.i
	digits := func() int {
		n := 0
		for d.i < len(d.data) && '0' <= d.data[d.i] && d.data[d.i] <= '9' {
			d.i++
			n++
		}
		return n
	}
	if d.data[d.i] == '-' {
		d.i++
	}
	switch {
	case d.i < len(d.data) && d.data[d.i] == '0':
		d.i++
	case digits() == 0:
		return nil, d.errorf("in a number")
	}
	if d.i < len(d.data) && d.data[d.i] == '.' {
		d.i++
		if digits() == 0 {
			return nil, d.errorf("after a decimal point")
		}
	}
	if d.i < len(d.data) && (d.data[d.i] == 'e' || d.data[d.i] == 'E') {
		d.i++
		if d.i < len(d.data) && (d.data[d.i] == '+' || d.data[d.i] == '-') {
			d.i++
		}
		if digits() == 0 {
			return nil, d.errorf("in an exponent")
		}
	}
	return json.Number(d.data[start:d.i]), nil
}

// str takes a string. Printable ASCII without escapes, all of a base64 payload, is copied as it is;
// the rest is decoded as encoding/json decodes it.
func (d *decoder) str() (string, error) {
	d.i++ // '"'
	start := d.i
	for d.i < len(d.data) && plain[d.data[d.i]] {
		d.i++
	}
	if d.i < len(d.data) && d.data[d.i] == '"' {
		s := string(d.data[start:d.i])
		d.i++
		return s, nil
	}
	b := make([]byte, d.i-start, d.i-start+64)
	copy(b, d.data[start:d.i])
	for d.i < len(d.data) {
		switch c := d.data[d.i]; {
		case c == '"':
			d.i++
			return string(b), nil
		case c < 0x20:
			return "", d.errorf("in a string literal")
		case c == '\\':
			d.i++
			if d.i >= len(d.data) {
				return "", d.errorf("")
			}
			switch e := d.data[d.i]; e {
			case '"', '\\', '/':
				b = append(b, e)
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'u':
				d.i-- // at the backslash, as hex4 wants
				r := d.hex4()
				if r < 0 {
					return "", d.errorf("in a \\u escape")
				}
				if utf16.IsSurrogate(r) {
					if r2 := d.hex4(); r2 >= 0 {
						if dec := utf16.DecodeRune(r, r2); dec != unicode.ReplacementChar {
							b = utf8.AppendRune(b, dec)
							continue
						}
						d.i -= 6 // not the pair's second half: it is read again as an escape of its own
					}
					r = unicode.ReplacementChar
				}
				b = utf8.AppendRune(b, r)
				continue
			default:
				return "", d.errorf("in a string escape code")
			}
			d.i++
		case c < utf8.RuneSelf:
			b = append(b, c)
			d.i++
		default:
			r, size := utf8.DecodeRune(d.data[d.i:])
			b = utf8.AppendRune(b, r) // an invalid byte is U+FFFD
			d.i += size
		}
	}
	return "", d.errorf("")
}

// plain marks the bytes a string holds as they are: printable ASCII but the quote and the backslash.
var plain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// hex4 reads a \uXXXX escape at d.i and returns its value, or -1 (and d.i unchanged) when there is none.
func (d *decoder) hex4() rune {
	if d.i+6 > len(d.data) || d.data[d.i] != '\\' || d.data[d.i+1] != 'u' {
		return -1
	}
	var r rune
	for _, c := range d.data[d.i+2 : d.i+6] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	d.i += 6
	return r
}
