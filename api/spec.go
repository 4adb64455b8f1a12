// Package api is the HTTP contract and its wire types. It embeds openapi.yaml, so that the server
// validates requests against the very document clients are given, and it declares the request and
// response bodies of the contract's operations, the one definition httpapi and client both encode and
// decode. The file is a verbatim copy of the user's contract; a test keeps it so. The types carry no
// behaviour: what a request means is the server's business, what a client makes of an answer the client's.
package api

import _ "embed"

// OpenAPI is the OpenAPI 3.1 document of the HTTP API.
//
//go:embed openapi.yaml
var OpenAPI []byte

// Extensions is the OpenAPI 3.1 document of sandboxd's operations beyond the contract, and of the
// sandboxd.* keys of spec.extensions. It answers errors in the contract's ErrorResponse.
//
//go:embed extensions.yaml
var Extensions []byte
