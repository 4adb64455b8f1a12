package httpapi

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync/atomic"

	"github.com/sandboxd/sandbox"
)

// Tokens is the set of bearer tokens the API accepts. It is safe for concurrent use: Set and Load replace
// the whole set atomically, so a request sees either the old set or the new one, never a mix.
//
// Tokens are kept as SHA-256 digests and a presented token is compared against every one of them with
// crypto/subtle, so neither the comparison nor the number of tokens tried says anything about where a
// wrong token differs from a right one, nor about a right token's length.
type Tokens struct {
	digests atomic.Pointer[[][sha256.Size]byte]
}

// NewTokens returns a set holding tokens. Empty tokens are refused.
func NewTokens(tokens ...string) (*Tokens, error) {
	t := &Tokens{}
	if err := t.Set(tokens); err != nil {
		return nil, err
	}
	return t, nil
}

// Set replaces the accepted tokens. It refuses an empty list or an empty token and then keeps the old set.
func (t *Tokens) Set(tokens []string) error {
	if len(tokens) == 0 {
		return fmt.Errorf("no bearer token given")
	}
	ds := make([][sha256.Size]byte, 0, len(tokens))
	for i, tok := range tokens {
		if tok == "" {
			return fmt.Errorf("bearer token %d is empty", i+1)
		}
		ds = append(ds, sha256.Sum256([]byte(tok)))
	}
	t.digests.Store(&ds)
	return nil
}

// Load replaces the accepted tokens with those of a token file: one token per line; surrounding
// white space is trimmed; blank lines and lines starting with '#' are skipped. A file that cannot be read
// or holds no token is an error, and the old set stays in force.
func (t *Tokens) Load(path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading token file: %w", err)
	}
	toks, err := ParseTokens(raw)
	if err != nil {
		return fmt.Errorf("token file %s: %w", path, err)
	}
	return t.Set(toks)
}

// ParseTokens reads the tokens of a token file's content (see Load).
func ParseTokens(raw []byte) ([]string, error) {
	var toks []string
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.ContainsAny(line, " \t") {
			return nil, fmt.Errorf("a token line holds white space")
		}
		toks = append(toks, line)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(toks) == 0 {
		return nil, fmt.Errorf("no token in the file")
	}
	return toks, nil
}

// Valid reports whether token is one of the set, in time independent of where it differs from them.
func (t *Tokens) Valid(token string) bool {
	p := t.digests.Load()
	if p == nil {
		return false
	}
	d := sha256.Sum256([]byte(token))
	ok := 0
	for i := range *p {
		ok |= subtle.ConstantTimeCompare(d[:], (*p)[i][:])
	}
	return ok == 1
}

// authenticate checks the request's bearer token when authentication is on. It returns
// ErrUnauthenticated for a missing, malformed or wrong token.
func (s *Server) authenticate(r *http.Request) error {
	if s.tokens == nil {
		return nil
	}
	h := r.Header.Get("Authorization")
	scheme, token, found := strings.Cut(h, " ")
	if h == "" {
		return fmt.Errorf("this API needs an Authorization: Bearer token: %w", sandbox.ErrUnauthenticated)
	}
	if !found || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return fmt.Errorf("the Authorization header must be \"Bearer <token>\": %w", sandbox.ErrUnauthenticated)
	}
	if !s.tokens.Valid(strings.TrimSpace(token)) {
		return fmt.Errorf("the bearer token is not valid: %w", sandbox.ErrUnauthenticated)
	}
	return nil
}

// guard puts authentication in front of an operation's handler: after routing (the mux has matched
// route and method) and before the body limit and validation. GET /healthz stays open, so that a load
// balancer can probe the daemon without a token.
func (s *Server) guard(path string, next http.Handler) http.Handler {
	if path == "/healthz" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := s.authenticate(r); err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sandboxd"`)
			if r.ContentLength != 0 {
				// Close instead of draining a body nobody will read: an unauthenticated client
				// cannot make the server read anything.
				w.Header().Set("Connection", "close")
			}
			s.writeError(w, r, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}
