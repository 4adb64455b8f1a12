package httpapi

import (
	"fmt"

	"github.com/sandboxd/sandbox"
)

// The bounds on the strings a client has the runtime store or hand to a provider. The contract sets none,
// and the body limit alone would let one create put 32 MiB in the store, in its sandbox.created event and
// in every subscriber's copy of that event. They are checked once a body has passed the contract's schema
// and before the runtime sees it, so a refused request records nothing and emits no event. A command's
// bounds are the domain's: the runtime checks them (sandbox.Command.Normalize) before it records anything.
const (
	MaxClientRequestIDBytes = 256                     // spec.clientRequestId
	MaxReferenceBytes       = 2048                    // spec.image and spec.template, each
	MaxExtensionsBytes      = 64 << 10                // spec.extensions: its members' names and values, as sent
	MaxPathBytes            = sandbox.MaxCwdBytes     // a file's path, as a command's cwd (PATH_MAX)
	MaxArgvEnvBytes         = sandbox.MaxArgvEnvBytes // a command's argv and env, checked by the runtime
)

// checkSpec checks spec against the bounds. Errors: ErrInvalidRequest.
func checkSpec(spec sandbox.Spec) error {
	if n := len(spec.ClientRequestID); n > MaxClientRequestIDBytes {
		return tooLong("clientRequestId", n, MaxClientRequestIDBytes)
	}
	if n := len(spec.Image); n > MaxReferenceBytes {
		return tooLong("image", n, MaxReferenceBytes)
	}
	if n := len(spec.Template); n > MaxReferenceBytes {
		return tooLong("template", n, MaxReferenceBytes)
	}
	n := 0
	for k, v := range spec.Extensions {
		n += len(k) + len(v)
	}
	if n > MaxExtensionsBytes {
		return tooLong("extensions", n, MaxExtensionsBytes)
	}
	return nil
}

// checkPath checks a file path against the bounds. Errors: ErrInvalidRequest.
func checkPath(path string) error {
	if n := len(path); n > MaxPathBytes {
		return tooLong("path", n, MaxPathBytes)
	}
	return nil
}

func tooLong(what string, n, most int) error {
	return fmt.Errorf("%s is %d bytes, over the limit of %d: %w", what, n, most, sandbox.ErrInvalidRequest)
}
