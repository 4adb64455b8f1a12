package client

import (
	"encoding/json"
	"fmt"
	"maps"
	"time"

	"github.com/sandboxd/sandbox"
)

// LifetimeKey is the spec.extensions and providerExtensions key of a sandbox's lifetime.
const LifetimeKey = "sandboxd.lifetime"

// Lifetime is the lifetime a spec asks for (spec.extensions["sandboxd.lifetime"]); what it leaves out
// the daemon's defaults fill in, and more than the daemon's maximum is refused (ErrInvalidRequest).
//
//   - TTLSeconds: the sandbox is terminated that long after its create or recreate (a state_changed
//     event with reason ttl_expired).
//   - IdleSeconds: once no API call has named the sandbox, no request of it has been open (a stream
//     included) and no background process has run in it for that long, it is paused or terminated
//     (reason idle).
//   - OnIdle: "pause" (the default where the provider can pause) or "terminate".
//   - ResumeOnCall: a command or file call to a sandbox paused that way resumes it first (the default
//     with OnIdle "pause").
type Lifetime struct {
	TTLSeconds   int64  `json:"ttlSeconds,omitempty"`
	IdleSeconds  int64  `json:"idleSeconds,omitempty"`
	OnIdle       string `json:"onIdle,omitempty"`
	ResumeOnCall *bool  `json:"resumeOnCall,omitempty"`
}

// WithLifetime returns spec with its sandboxd.lifetime extension set to lt.
func WithLifetime(spec sandbox.Spec, lt Lifetime) sandbox.Spec {
	raw, _ := json.Marshal(lt) // of ints, a string and a bool: it cannot fail
	ext := make(map[string]json.RawMessage, len(spec.Extensions)+1)
	maps.Copy(ext, spec.Extensions)
	ext[LifetimeKey] = raw
	spec.Extensions = ext
	return spec
}

// RecordedLifetime is the lifetime that holds for a sandbox's generation, as the daemon recorded it
// in providerExtensions["sandboxd.lifetime"] with its defaults and maxima applied: Since is when the
// generation was recorded, the start of its lifetime, and ExpiresAt is Since plus TTLSeconds. A figure
// the generation has none of is zero (nil for ExpiresAt).
type RecordedLifetime struct {
	Since        time.Time  `json:"since"`
	TTLSeconds   int64      `json:"ttlSeconds,omitempty"`
	ExpiresAt    *time.Time `json:"expiresAt,omitempty"`
	IdleSeconds  int64      `json:"idleSeconds,omitempty"`
	OnIdle       string     `json:"onIdle,omitempty"`
	ResumeOnCall bool       `json:"resumeOnCall,omitempty"`
}

// LifetimeOf reads the lifetime recorded for sb's generation; nil, and no error, when it has none.
func LifetimeOf(sb *sandbox.Sandbox) (*RecordedLifetime, error) {
	raw, ok := sb.ProviderExtensions[LifetimeKey]
	if !ok {
		return nil, nil
	}
	var lt RecordedLifetime
	if err := json.Unmarshal(raw, &lt); err != nil || lt.Since.IsZero() {
		return nil, fmt.Errorf("providerExtensions %q of sandbox %s: %.200q is no recorded lifetime: %w", LifetimeKey, sb.ID, raw, sandbox.ErrProviderProtocol)
	}
	return &lt, nil
}
