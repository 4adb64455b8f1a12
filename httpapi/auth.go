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
	set atomic.Pointer[tokenSet]
}

// tokenSet is one generation of the accepted tokens: their digests and, index for index, their names.
type tokenSet struct {
	digests [][sha256.Size]byte
	names   []string
}

// tokenName is the name of a token given none: the first 8 hex digits of its SHA-256, which say
// which token was used without saying what it is.
func tokenName(d [sha256.Size]byte) string { return fmt.Sprintf("sha256:%x", d[:4]) }

// NewTokens returns a set holding tokens. Empty tokens are refused.
func NewTokens(tokens ...string) (*Tokens, error) {
	t := &Tokens{}
	if err := t.Set(tokens); err != nil {
		return nil, err
	}
	return t, nil
}

// Set replaces the accepted tokens, each named by its digest (tokenName). It refuses an empty list or
// an empty token and then keeps the old set.
func (t *Tokens) Set(tokens []string) error {
	named := make([]NamedToken, len(tokens))
	for i, tok := range tokens {
		named[i].Token = tok
	}
	return t.SetNamed(named)
}

// NamedToken is an accepted token and the name the audit log gives who uses it.
type NamedToken struct {
	Name  string // empty: the token's digest names it
	Token string
}

// SetNamed replaces the accepted tokens. It refuses an empty list or an empty token and then keeps the
// old set.
func (t *Tokens) SetNamed(tokens []NamedToken) error {
	if len(tokens) == 0 {
		return fmt.Errorf("no bearer token given")
	}
	set := &tokenSet{}
	for i, tok := range tokens {
		if tok.Token == "" {
			return fmt.Errorf("bearer token %d is empty", i+1)
		}
		d := sha256.Sum256([]byte(tok.Token))
		name := tok.Name
		if name == "" {
			name = tokenName(d)
		}
		set.digests = append(set.digests, d)
		set.names = append(set.names, name)
	}
	t.set.Store(set)
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
	toks, err := ParseNamedTokens(raw)
	if err != nil {
		return fmt.Errorf("token file %s: %w", path, err)
	}
	return t.SetNamed(toks)
}

// ParseTokens reads the tokens of a token file's content (see Load), without their names.
func ParseTokens(raw []byte) ([]string, error) {
	named, err := ParseNamedTokens(raw)
	if err != nil {
		return nil, err
	}
	toks := make([]string, len(named))
	for i, n := range named {
		toks[i] = n.Token
	}
	return toks, nil
}

// ParseNamedTokens reads a token file's content: a line holds a token, or a name, white space and the
// token ("ci-runner s3cr3t..."), the name being what the audit log calls who used it.
func ParseNamedTokens(raw []byte) ([]NamedToken, error) {
	var toks []NamedToken
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		switch len(fields) {
		case 1:
			toks = append(toks, NamedToken{Token: fields[0]})
		case 2:
			if !validTokenName(fields[0]) {
				return nil, fmt.Errorf("a token's name must be 1-64 letters, digits, '.', '_', '-' or '@'")
			}
			toks = append(toks, NamedToken{Name: fields[0], Token: fields[1]})
		default:
			return nil, fmt.Errorf("a token line holds more than a name and a token")
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(toks) == 0 {
		return nil, fmt.Errorf("no token in the file")
	}
	return toks, nil
}

func validTokenName(n string) bool {
	if n == "" || len(n) > 64 {
		return false
	}
	for _, c := range n {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("._-@", c)) {
			return false
		}
	}
	return true
}

// Valid reports whether token is one of the set, in time independent of where it differs from them.
func (t *Tokens) Valid(token string) bool {
	_, ok := t.Name(token)
	return ok
}

// Name returns the name of token when it is one of the set, in time independent of where it differs
// from them: every digest is compared.
func (t *Tokens) Name(token string) (string, bool) {
	set := t.set.Load()
	if set == nil {
		return "", false
	}
	d := sha256.Sum256([]byte(token))
	found := -1
	for i := range set.digests {
		if subtle.ConstantTimeCompare(d[:], set.digests[i][:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return "", false
	}
	return set.names[found], true
}

// authenticate checks the request's bearer token when authentication is on, and returns its name
// ("" when authentication is off). It returns ErrUnauthenticated for a missing, malformed or wrong
// token.
func (s *Server) authenticate(r *http.Request) (string, error) {
	if s.tokens == nil {
		return "", nil
	}
	h := r.Header.Get("Authorization")
	scheme, token, found := strings.Cut(h, " ")
	if h == "" {
		return "", fmt.Errorf("this API needs an Authorization: Bearer token: %w", sandbox.ErrUnauthenticated)
	}
	if !found || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", fmt.Errorf("the Authorization header must be \"Bearer <token>\": %w", sandbox.ErrUnauthenticated)
	}
	name, ok := s.tokens.Name(strings.TrimSpace(token))
	if !ok {
		return "", fmt.Errorf("the bearer token is not valid: %w", sandbox.ErrUnauthenticated)
	}
	return name, nil
}

// guard puts authentication in front of an operation's handler: after routing (the mux has matched
// route and method) and before the body limit and validation. GET /healthz stays open, so that a load
// balancer can probe the daemon without a token.
func (s *Server) guard(path string, next http.Handler) http.Handler {
	if path == "/healthz" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		who, err := s.authenticate(r)
		if sw, ok := w.(*statusWriter); ok {
			sw.who = who
		}
		if err != nil {
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
