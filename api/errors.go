package api

import "github.com/sandboxd/sandbox"

// ErrorResponse is the body of every error response.
type ErrorResponse struct {
	Error ErrorBody `json:"error"`
}

// ErrorBody is the error of an ErrorResponse.
type ErrorBody struct {
	Code    sandbox.ErrorCode `json:"code"`
	Message string            `json:"message"`
}
