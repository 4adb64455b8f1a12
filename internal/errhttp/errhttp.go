// Package errhttp is the one table from the domain's error codes to HTTP statuses, for the API (httpapi)
// and the agent's wire alike. The domain's error classes know their wire code but no transport: a status
// is the business of the HTTP layers, as containerd keeps errdefs transport-free and maps in errhttp.
// Its invariant: every code of sandbox.ErrorClasses has a status here, and anything else is a 500.
package errhttp

import (
	"net/http"

	"github.com/sandboxd/sandbox"
)

// statuses is the table. Three codes share 409: a client tells them apart by error.code, never by status.
var statuses = map[sandbox.ErrorCode]int{
	sandbox.CodeInvalidRequest:          http.StatusBadRequest,
	sandbox.CodeUnauthenticated:         http.StatusUnauthorized,
	sandbox.CodeNotFound:                http.StatusNotFound,
	sandbox.CodeMethodNotAllowed:        http.StatusMethodNotAllowed,
	sandbox.CodeGenerationConflict:      http.StatusConflict,
	sandbox.CodeIdempotencyConflict:     http.StatusConflict,
	sandbox.CodeInvalidState:            http.StatusConflict,
	sandbox.CodeEventHistoryUnavailable: http.StatusGone,
	sandbox.CodeRequestTooLarge:         http.StatusRequestEntityTooLarge,
	sandbox.CodeUnsupportedCapability:   http.StatusUnprocessableEntity,
	sandbox.CodeProviderProtocol:        http.StatusBadGateway,
	sandbox.CodePortUnreachable:         http.StatusBadGateway,
	sandbox.CodeProviderUnavailable:     http.StatusServiceUnavailable,
	sandbox.CodeInternal:                http.StatusInternalServerError,
}

// Status returns the HTTP status of an error code: 500 for "internal" and for a code the table lacks.
func Status(code sandbox.ErrorCode) int {
	if s, ok := statuses[code]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// StatusOf returns the HTTP status of err's class (sandbox.ClassOf): 500 for an unclassified error.
func StatusOf(err error) int { return Status(sandbox.ClassOf(err).Code) }
