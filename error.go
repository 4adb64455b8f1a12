package sandbox

import "errors"

// The error classes. Every error the runtime returns wraps exactly one of them (or none, which makes it
// an internal error). Each has a wire code (ErrorClasses); its HTTP status is the transport's business
// (internal/errhttp), not the domain's.
var (
	ErrInvalidRequest          = errors.New("invalid request")
	ErrUnauthenticated         = errors.New("unauthenticated")
	ErrNotFound                = errors.New("not found")
	ErrMethodNotAllowed        = errors.New("method not allowed")
	ErrRequestTooLarge         = errors.New("request too large")
	ErrGenerationConflict      = errors.New("generation conflict")
	ErrIdempotencyConflict     = errors.New("idempotency conflict")
	ErrInvalidState            = errors.New("invalid state")
	ErrUnsupportedCapability   = errors.New("unsupported capability")
	ErrProviderProtocol        = errors.New("provider protocol error")
	ErrProviderUnavailable     = errors.New("provider unavailable")
	ErrEventHistoryUnavailable = errors.New("event history unavailable")
	ErrPortUnreachable         = errors.New("port unreachable")
)

// ErrorCode is the wire code of an error class, as in ErrorResponse.error.code.
type ErrorCode string

// The wire codes.
const (
	CodeInvalidRequest          ErrorCode = "invalid_request"
	CodeUnauthenticated         ErrorCode = "unauthenticated"
	CodeNotFound                ErrorCode = "not_found"
	CodeMethodNotAllowed        ErrorCode = "method_not_allowed"
	CodeRequestTooLarge         ErrorCode = "request_too_large"
	CodeGenerationConflict      ErrorCode = "generation_conflict"
	CodeIdempotencyConflict     ErrorCode = "idempotency_conflict"
	CodeInvalidState            ErrorCode = "invalid_state"
	CodeUnsupportedCapability   ErrorCode = "unsupported_capability"
	CodeProviderProtocol        ErrorCode = "provider_protocol_error"
	CodeProviderUnavailable     ErrorCode = "provider_unavailable"
	CodeEventHistoryUnavailable ErrorCode = "event_history_unavailable"
	CodePortUnreachable         ErrorCode = "port_unreachable"
	CodeInternal                ErrorCode = "internal"
)

// ErrorClass ties a sentinel to its wire code. Its HTTP status is the transport's (internal/errhttp).
type ErrorClass struct {
	Err  error
	Code ErrorCode
}

// ErrorClasses is the one table from error class to wire code.
var ErrorClasses = []ErrorClass{
	{ErrInvalidRequest, CodeInvalidRequest},
	{ErrUnauthenticated, CodeUnauthenticated},
	{ErrNotFound, CodeNotFound},
	{ErrMethodNotAllowed, CodeMethodNotAllowed},
	{ErrGenerationConflict, CodeGenerationConflict},
	{ErrIdempotencyConflict, CodeIdempotencyConflict},
	{ErrInvalidState, CodeInvalidState},
	{ErrEventHistoryUnavailable, CodeEventHistoryUnavailable},
	{ErrRequestTooLarge, CodeRequestTooLarge},
	{ErrUnsupportedCapability, CodeUnsupportedCapability},
	{ErrPortUnreachable, CodePortUnreachable},
	{ErrProviderProtocol, CodeProviderProtocol},
	{ErrProviderUnavailable, CodeProviderUnavailable},
}

// ClassOf returns the class err belongs to, or the internal class when it belongs to none.
func ClassOf(err error) ErrorClass {
	for _, c := range ErrorClasses {
		if errors.Is(err, c.Err) {
			return c
		}
	}
	return ErrorClass{Err: nil, Code: CodeInternal}
}

// ErrorForCode returns the sentinel for a wire code, or nil for an unknown code or "internal".
func ErrorForCode(code ErrorCode) error {
	for _, c := range ErrorClasses {
		if c.Code == code {
			return c.Err
		}
	}
	return nil
}
