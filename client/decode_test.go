package client

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// TestBodyDecodersMatchEncodingJSON: the answers that decode themselves give what encoding/json gives
// for the same bodies, and fail where it fails.
func TestBodyDecodersMatchEncodingJSON(t *testing.T) {
	big := strings.Repeat("0123456789abcdef\n", 1<<16)
	for _, body := range []string{
		`{"exitCode":0,"stdout":"hi\n","stderr":"","timedOut":false,"cancelled":false,"truncated":false,"startedAt":"2026-11-30T12:00:00.123456789Z","finishedAt":"2026-11-30T12:00:01Z"}`,
		`{"exitCode":null,"stdout":"","stderr":"caf\u00e9 \ud83d\ude00","timedOut":true,"cancelled":false,"truncated":true,"startedAt":"2026-11-30T12:00:00+01:00","finishedAt":"2026-11-30T12:00:01Z","extra":[1,{"x":2}]}`,
		`{"exitCode":127,"stdout":` + mustJSON(t, big) + `,"stderr":"x"}`,
		`{"path":"a/b.bin","contentBase64":"aGVsbG8=","size":5}`,
		`{"path":null,"contentBase64":"","size":0}`,
		`{}`,
	} {
		checkBody(t, body)
	}
	// Each of these is refused by encoding/json for at least one of the two answers.
	for _, body := range []string{
		`{"exitCode":"0"}`, `{"exitCode":1.5}`, `{"stdout":1}`, `{"timedOut":"yes"}`, `{"startedAt":"yesterday"}`,
		`{"size":"5"}`, `{"path":true}`, `[]`, `"text"`, `{"stdout":"x"`, ``,
	} {
		if !checkBody(t, body) {
			t.Errorf("%q: encoding/json refuses neither answer", body)
		}
	}
}

// checkBody decodes body as both answers both ways, and reports whether encoding/json refused one.
func checkBody(t *testing.T, body string) (refused bool) {
	t.Helper()
	var res, wantRes commandResult
	var fc, wantFC fileContent
	for _, c := range []struct {
		what      string
		err, werr error
		got, want any
	}{
		{"command result", res.decodeBody([]byte(body)), json.Unmarshal([]byte(body), &wantRes.CommandResult), &res, &wantRes},
		{"file content", fc.decodeBody([]byte(body)), json.Unmarshal([]byte(body), &wantFC), &fc, &wantFC},
	} {
		refused = refused || c.werr != nil
		switch {
		case (c.err != nil) != (c.werr != nil):
			t.Errorf("%s of %.80q: error %v, encoding/json %v", c.what, body, c.err, c.werr)
		case c.err == nil && !reflect.DeepEqual(c.got, c.want):
			t.Errorf("%s of %.80q: %+v, encoding/json %+v", c.what, body, c.got, c.want)
		}
	}
	return refused
}

func mustJSON(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
