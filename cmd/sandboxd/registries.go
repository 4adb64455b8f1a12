package main

import (
	"fmt"
	"strings"
)

// registriesFlag is --insecure-registry: registries named by host or host:port, repeatable, comma
// separated.
type registriesFlag struct{ hosts *[]string }

func (f *registriesFlag) String() string {
	if f.hosts == nil {
		return ""
	}
	return strings.Join(*f.hosts, ",")
}

func (f *registriesFlag) Set(v string) error {
	for _, h := range strings.Split(v, ",") {
		if h = strings.TrimSpace(h); h == "" {
			continue
		}
		if strings.ContainsAny(h, "/@ \t") {
			return fmt.Errorf("%q is no registry host (host or host:port)", h)
		}
		*f.hosts = append(*f.hosts, h)
	}
	return nil
}
