package jsondoc

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
)

// stdDecode is what Decode must equal: encoding/json into an interface{} with UseNumber, then nothing
// but white space.
func stdDecode(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	v, err := stdDecodeFirst(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the value")
	}
	return v, nil
}

// stdDecodeFirst is what DecodeFirst must equal: one Decode of a json.Decoder with UseNumber.
func stdDecodeFirst(dec *json.Decoder) (any, error) {
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

var decodeSeeds = []string{
	``, ` `, `null`, `true`, `false`, `tru`, `nul`, `0`, `-0`, `01`, `-`, `1.`, `1.5e+10`, `1E-2`, `.5`, `+1`,
	`"plain"`, `"esc \" \\ \/ \b \f \n \r \t"`, `"\u00e9\u20AC"`, `"\ud83d\ude00"`, `"\ud83d"`, `"\ude00\ud83d"`,
	`"\ud83dx"`, `"\ud83d\u0041"`, `"\ud83d\uZZZZ"`, `"\u12"`, `"\x"`, `"\'"`, "\"tab\there\"", "\"nl\nhere\"",
	"\"\xff\xfe\"", "\"\xed\xa0\x80\"", "\"caf\xc3\xa9\"", "\"\xef\xbf\xbd\"", `"unterminated`, `"a\`,
	`{}`, `[]`, `[1,2,]`, `[,]`, `{"a":1,}`, `{"a" 1}`, `{a:1}`, `{"a":1,"a":2}`, `{"a":[{"b":null}]}`,
	`{"path":"f","contentBase64":"aGVsbG8=","expectedGeneration":1}`, ` [1] `, `[1] x`, `1 2`, `{}}`, "\xef\xbb\xbf{}",
	`{"expectedGeneration":1}0`, `1x`, `01`, `0.5.3`, `"s"x`, `1.x`, `true false`,
	strings.Repeat("[", 10000) + strings.Repeat("]", 10000), strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
}

func TestDecodeMatchesEncodingJSON(t *testing.T) {
	for _, s := range decodeSeeds {
		checkDecode(t, []byte(s))
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkDecode(t, data) })
}

func checkDecode(t *testing.T, data []byte) {
	t.Helper()
	got, err := Decode(data)
	want, werr := stdDecode(data)
	if (err == nil) != (werr == nil) {
		t.Fatalf("%q: Decode error %v, encoding/json error %v", data, err, werr)
	}
	if err == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: Decode %#v, encoding/json %#v", data, got, want)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	first, rest, err := DecodeFirst(data)
	want, werr = stdDecodeFirst(dec)
	if (err == nil) != (werr == nil) {
		t.Fatalf("%q: DecodeFirst error %v, json.Decoder error %v", data, err, werr)
	}
	if err == nil && (!reflect.DeepEqual(first, want) || len(data)-len(rest) != int(dec.InputOffset())) {
		t.Fatalf("%q: DecodeFirst %#v and %d bytes, json.Decoder %#v and %d", data, first, len(data)-len(rest), want, dec.InputOffset())
	}

}

// BenchmarkDecodeWrite1MiB and BenchmarkStdDecodeWrite1MiB decode a write of 1 MiB.
func BenchmarkDecodeWrite1MiB(b *testing.B)    { benchDecode(b, Decode) }
func BenchmarkStdDecodeWrite1MiB(b *testing.B) { benchDecode(b, stdDecode) }

func benchDecode(b *testing.B, decode func([]byte) (any, error)) {
	body, _ := json.Marshal(map[string]any{"path": "f.bin", "contentBase64": make([]byte, 1<<20), "expectedGeneration": 1})
	b.SetBytes(int64(len(body)))
	for i := 0; i < b.N; i++ {
		if _, err := decode(body); err != nil {
			b.Fatal(err)
		}
	}
}
