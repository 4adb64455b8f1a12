// Package api embeds the HTTP contract, openapi.yaml, so that the server validates requests against the
// very document clients are given. The file is a verbatim copy of the user's contract; a test keeps it so.
package api

import _ "embed"

// OpenAPI is the OpenAPI 3.1 document of the HTTP API.
//
//go:embed openapi.yaml
var OpenAPI []byte
