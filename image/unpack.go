package image

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"github.com/opencontainers/umoci/oci/layer"
)

// ErrLayerTooLarge is returned when a layer's files add up to more than the store's bound.
var ErrLayerTooLarge = errors.New("layer past the bound of unpacked bytes")

// unpackLayer unpacks the uncompressed layer tar r into the empty directory dir, in overlayfs's
// format: a whiteout becomes a 0:0 character device, an opaque directory the trusted.overlay.opaque
// xattr, and an overlay xattr the layer itself carries is escaped (umoci's extractor, which also
// resolves every entry's path inside dir, symlinks of the layer included: no entry lands outside it).
// Device nodes are dropped: a sandbox's /dev is its own, and a layer's nodes would only be reachable
// through a nodev mount. The files' sizes, sparse ones at their full length, add up to at most max
// bytes (ErrLayerTooLarge). It returns the layer's diffID, the sha256 of r as read.
func unpackLayer(dir string, r io.Reader, max int64) (string, error) {
	h := sha256.New()
	tr := tar.NewReader(io.TeeReader(r, h))
	te := layer.NewTarExtractor(&layer.UnpackOptions{OnDiskFormat: layer.OverlayfsRootfs{}})
	var total int64
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", fmt.Errorf("read the layer: %w", err)
		}
		switch hdr.Typeflag {
		case tar.TypeChar, tar.TypeBlock:
			continue
		case tar.TypeReg, tar.TypeGNUSparse:
			total += hdr.Size
			if hdr.Size < 0 || total > max {
				return "", fmt.Errorf("%s: %d bytes so far, at most %d: %w", hdr.Name, total, max, ErrLayerTooLarge)
			}
		}
		if err := te.UnpackEntry(dir, hdr, tr); err != nil {
			return "", fmt.Errorf("unpack %s: %w", hdr.Name, err)
		}
	}
	// What follows the tar's end is part of the blob: hashed too, as the diffID covers it.
	if _, err := io.Copy(io.Discard, io.TeeReader(r, h)); err != nil {
		return "", fmt.Errorf("read the layer: %w", err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}
