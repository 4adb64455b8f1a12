//go:build !plainschema

package main

import "github.com/sandboxd/sandbox/internal/schema"

// plainSchemas is the library path of request validation, which --plain schema switches to; nil: this
// build has none, so that the library's initialisation stays out of every process of the binary
// (docs/design/request-validation.md).
var plainSchemas schema.Compiler
