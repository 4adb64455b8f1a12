// Package faults drives provider faults through the HTTP API: the real stack (httpapi over core over a
// SQLite store) on 127.0.0.1 with the host provider wrapped in provider/fault. It adds to core's and
// apitest's fault tests what only shows end to end: hangs answered 503 within the provider timeout,
// providers that die half way through create, pause and terminate, malformed observations answered 502,
// a resource lost behind the runtime's back, and that a failed or stuck sandbox can always be terminated
// without leaving its resource behind.
package faults
