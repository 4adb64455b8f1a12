package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
)

// TestPreviewListener: --preview-listen serves preview URLs on a listener of their own, which refuses a
// request without a token, and the secret tokens are signed with is made once, readable by root only.
func TestPreviewListener(t *testing.T) {
	m, _ := startMain(t, "--preview-listen", "127.0.0.1:0")
	defer m.Close()
	if m.PreviewAddr() == "" {
		t.Fatal("no preview listener")
	}
	resp, err := http.Get("http://" + m.PreviewAddr() + "/p/sbx_nosuch/8080/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var er struct {
		Error struct{ Code string } `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&er); err != nil || resp.StatusCode != 401 || er.Error.Code != "unauthenticated" {
		t.Errorf("no token: %d %+v %v", resp.StatusCode, er, err)
	}
	st, err := os.Stat(filepath.Join(m.DataDir, "preview.key"))
	if err != nil || st.Mode().Perm() != 0o600 || st.Size() != 32 {
		t.Errorf("preview.key: %v %v", st, err)
	}
}
