package client

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"testing"
)

// TestDecodeOutputEvent: the server's form of an output event and any other JSON of the same value
// decode alike; malformed data is an error, never bytes.
func TestDecodeOutputEvent(t *testing.T) {
	data := []byte("hello \x00\xff world/+=")
	b64 := base64.StdEncoding.EncodeToString(data)
	generic, _ := json.Marshal(map[string]any{"dataBase64": data, "offset": 42})
	for _, form := range []string{`{"offset":42,"dataBase64":"` + b64 + `"}`, string(generic), `{ "offset": 42, "dataBase64": "` + b64 + `" }`} {
		ev, err := decodeOutputEvent(form)
		if err != nil || ev.Offset != 42 || !bytes.Equal(ev.Data, data) {
			t.Errorf("%s: %+v, %v", form, ev, err)
		}
	}
	for _, bad := range []string{`{"offset":42,"dataBase64":"!!"}`, `{"offset":42,"dataBase64":"aGk"}`, `{"offset":4`, `[1]`} {
		if ev, err := decodeOutputEvent(bad); err == nil {
			t.Errorf("%s: decoded %+v", bad, ev)
		}
	}
}
