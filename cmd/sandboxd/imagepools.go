package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sandboxd/sandbox/image"
	"github.com/sandboxd/sandbox/provider/oci"
)

// imagePoolsFlag is --oci-warm-pool-image (or, with template, --oci-warm-pool-template): REF=N, a warm
// pool of N started containers of the image (or template) REF; repeatable, comma separated.
type imagePoolsFlag struct {
	pools    *[]oci.ImagePool
	template bool
}

func (f *imagePoolsFlag) String() string {
	if f.pools == nil {
		return ""
	}
	var out []string
	for _, p := range *f.pools {
		if p.Template == f.template {
			out = append(out, p.Ref+"="+strconv.Itoa(p.Size))
		}
	}
	return strings.Join(out, ",")
}

func (f *imagePoolsFlag) Set(v string) error {
	for _, kv := range strings.Split(v, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		ref, n, ok := strings.Cut(kv, "=")
		size, err := strconv.Atoi(n)
		if !ok || err != nil || size < 1 || size > 1000 {
			return fmt.Errorf("%q: want REF=N, N between 1 and 1000", kv)
		}
		if f.template {
			_, _, _, err = image.ParseTemplateRef(ref)
		} else {
			_, _, err = image.Normalize(ref)
		}
		if err != nil {
			return err
		}
		for _, p := range *f.pools {
			if p.Ref == ref && p.Template == f.template {
				return fmt.Errorf("%q: a warm pool of %s is configured already", kv, ref)
			}
		}
		*f.pools = append(*f.pools, oci.ImagePool{Ref: ref, Template: f.template, Size: size})
	}
	return nil
}
