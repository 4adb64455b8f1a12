package sandbox

import "strings"

// ExtensionNamespace prefixes the spec.extensions keys that are sandboxd's own. Keys of any other
// namespace are stored and returned untouched and never change behaviour.
const ExtensionNamespace = "sandboxd."

// extensionCapabilities maps each of sandboxd's spec.extensions keys to the capability it needs ("":
// none, every provider honours it). The keys, their schemas and their capabilities are documented in
// api/extensions.yaml (x-capability); a test keeps this table and the document equal.
var extensionCapabilities = map[string]Capability{
	"sandboxd.lifetime": "",
	VolumesKey:          CapPersistentVolume,
	"sandboxd.network":  CapNetworkPolicy,
	// A fork of a checkpoint (the oci provider's, on gVisor).
	"sandboxd.checkpoint": CapMemorySnapshot,
}

// IsOwnExtension reports whether key is in sandboxd's namespace.
func IsOwnExtension(key string) bool { return strings.HasPrefix(key, ExtensionNamespace) }

// ExtensionCapability returns the capability one of sandboxd's spec.extensions keys needs ("" for
// none); false for a key sandboxd does not know.
func ExtensionCapability(key string) (Capability, bool) {
	c, ok := extensionCapabilities[key]
	return c, ok
}

// ExtensionKeys returns sandboxd's spec.extensions keys, in no particular order.
func ExtensionKeys() []string {
	out := make([]string, 0, len(extensionCapabilities))
	for k := range extensionCapabilities {
		out = append(out, k)
	}
	return out
}
