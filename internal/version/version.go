// Package version is the version of this build, the one every part of it reports: the daemon's
// `sandboxd version`, the agent's health answer and the providers' manifests.
package version

// Version is set at build time with
// -ldflags "-X github.com/sandboxd/sandbox/internal/version.Version=...".
var Version = "0.1.0-dev"
