// Package sandbox is the domain of the sandbox runtime: sandboxes, their specs, states and generations,
// events, the error classes, and the small interfaces the runtime core consumes (Provider, Store).
//
// It does no I/O. Its main invariant: a sandbox's (ID, Generation) pair names exactly one incarnation,
// and every mutation of that incarnation is fenced by its generation.
package sandbox

import (
	"bytes"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// ProtocolVersion is the version of the HTTP contract this runtime implements.
const ProtocolVersion = "0.1"

// ID is the stable logical identity of a sandbox, chosen by the runtime.
type ID string

// NewID returns a fresh, URL-safe sandbox id: "sbx_" and 20 lower-case base32 characters (100 random bits).
func NewID() ID {
	var b [13]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("sandbox: crypto/rand failed: %v", err)) // never happens on Linux
	}
	s := base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:])
	return ID("sbx_" + strings.ToLower(s[:20]))
}

// Generation is the incarnation number of a sandbox. It starts at 1 and grows by one on each recreate.
type Generation int64

// Ref names one incarnation of a sandbox: what a provider allocates, observes and releases.
type Ref struct {
	ID         ID
	Generation Generation
}

// Name is the stable provider-side resource name derived from the id and generation, so that a repeated
// or retried allocation finds the existing resource instead of making a second one.
func (r Ref) Name() string { return fmt.Sprintf("%s-g%d", r.ID, r.Generation) }

func (r Ref) String() string { return r.Name() }

// Resources are the requested resource limits of a sandbox.
type Resources struct {
	CPUMillis int64 `json:"cpuMillis,omitempty"`
	MemoryMiB int64 `json:"memoryMiB,omitempty"`
	DiskMiB   int64 `json:"diskMiB,omitempty"`
}

// Spec is the desired state of a sandbox as the client sent it.
type Spec struct {
	ClientRequestID      string                     `json:"clientRequestId"`
	Image                string                     `json:"image,omitempty"`
	Template             string                     `json:"template,omitempty"`
	Resources            *Resources                 `json:"resources,omitempty"`
	RequiredCapabilities []Capability               `json:"requiredCapabilities,omitempty"`
	Extensions           map[string]json.RawMessage `json:"extensions,omitempty"`
}

// CanonicalJSON returns the spec in a canonical JSON form: object keys sorted at every depth, no
// insignificant whitespace, numbers as written. Two specs are the same create intent when their canonical
// forms are equal.
func (s Spec) CanonicalJSON() ([]byte, error) {
	raw, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	return Canonicalize(raw)
}

// Canonicalize rewrites a JSON document with object keys sorted at every depth and no insignificant
// whitespace. Numbers keep their literal text.
func Canonicalize(raw []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	// encoding/json sorts map keys and writes json.Number verbatim.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// Endpoint is where a provider says a sandbox can be reached, if anywhere.
type Endpoint struct {
	BaseURL string `json:"baseUrl"`
}

// Failure says why a sandbox is failed.
type Failure struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Sandbox is the runtime's record of one logical sandbox and its current generation.
type Sandbox struct {
	ID                 ID                         `json:"id"`
	Generation         Generation                 `json:"generation"`
	State              State                      `json:"state"`
	Spec               Spec                       `json:"spec"`
	Provider           string                     `json:"provider"`
	Endpoint           *Endpoint                  `json:"endpoint,omitempty"`
	ProviderExtensions map[string]json.RawMessage `json:"providerExtensions,omitempty"`
	Failure            *Failure                   `json:"failure,omitempty"`
	CreatedAt          time.Time                  `json:"createdAt"`
	UpdatedAt          time.Time                  `json:"updatedAt"`
}

// Ref returns the reference to the sandbox's current generation.
func (s *Sandbox) Ref() Ref { return Ref{ID: s.ID, Generation: s.Generation} }
