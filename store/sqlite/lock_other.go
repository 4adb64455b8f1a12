//go:build !unix

package sqlite

import "os"

// lockFile takes no lock where flock is missing; SQLite's own locking still keeps the file
// consistent, but two Stores on one file would serve stale sandboxes from their caches.
func lockFile(path string) (*os.File, error) { return nil, nil }
