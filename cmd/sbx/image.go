package main

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sandboxd/sandbox"
)

// imageCmd is `sbx image`: the daemon's images, for spec.image (`sbx create --image`).
func (a *app) imageCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "image",
		Short: "Pull, import, list, inspect and remove the daemon's images",
		Long: `sbx image manages the images sandboxes run on (sbx create --image NAME).

A pull names its registry (registry/repository:tag or registry/repository@sha256:...);
the daemon reaches a registry over plain HTTP only when started with --insecure-registry.
An import reads an OCI layout directory, or a docker-save or oci-archive tarball, from a
path on the daemon's host, and names the image.`,
		Example: `  sbx image import ./busybox-oci tools/busybox:1
  sbx image pull registry.example:5000/tools/busybox:1
  sbx image ls
  sbx image rm tools/busybox:1 && sbx image prune`,
	}
	cmd.AddCommand(
		&cobra.Command{
			Use:   "pull REFERENCE",
			Short: "Fetch an image from its registry",
			Args:  exactArgs(1, "an image reference"),
			RunE: func(_ *cobra.Command, args []string) error {
				bar := a.imageBar("pulling " + args[0])
				info, err := a.c.PullImageProgress(a.ctx, args[0], bar.report)
				bar.finish()
				return a.printImage(info, err)
			},
		},
		&cobra.Command{
			Use:   "import PATH NAME",
			Short: "Add the image of an OCI layout or a tarball on the daemon's host",
			Args:  exactArgs(2, "a path and a name"),
			RunE: func(_ *cobra.Command, args []string) error {
				path, err := filepath.Abs(args[0])
				if err != nil {
					return err
				}
				bar := a.imageBar("importing " + args[0])
				info, err := a.c.ImportImageProgress(a.ctx, path, args[1], bar.report)
				bar.finish()
				return a.printImage(info, err)
			},
		},
		&cobra.Command{
			Use:     "ls",
			Aliases: []string{"list"},
			Short:   "List the images",
			Args:    exactArgs(0, "no arguments"),
			RunE: func(*cobra.Command, []string) error {
				list, err := a.c.Images(a.ctx)
				if err != nil {
					return err
				}
				if a.json() {
					if list == nil {
						list = []sandbox.ImageInfo{}
					}
					return a.writeJSON(list)
				}
				t := a.table("digest", "layers", "sandboxes", "names")
				for _, im := range list {
					t.row(shortDigest(im.Digest), strconv.Itoa(im.Layers), strconv.Itoa(im.Users), strings.Join(im.Names, ", "))
				}
				return t.flush()
			},
		},
		&cobra.Command{
			Use:   "inspect DIGEST",
			Short: "Show one image",
			Args:  exactArgs(1, "an image digest (sha256:...)"),
			RunE: func(_ *cobra.Command, args []string) error {
				info, err := a.c.Image(a.ctx, args[0])
				return a.printImage(info, err)
			},
		},
		&cobra.Command{
			Use:     "rm REFERENCE",
			Aliases: []string{"remove"},
			Short:   "Forget a name, or by digest an image and all its names (refused while a sandbox runs on it)",
			Args:    exactArgs(1, "an image name or digest"),
			RunE: func(_ *cobra.Command, args []string) error {
				if err := a.c.RemoveImage(a.ctx, args[0]); err != nil {
					return err
				}
				if a.json() {
					return a.writeJSON(map[string]string{"reference": args[0]})
				}
				_, err := fmt.Fprintln(a.stdout, "removed", args[0])
				return err
			},
		},
		&cobra.Command{
			Use:   "prune",
			Short: "Remove the images and layers nothing holds",
			Args:  exactArgs(0, "no arguments"),
			RunE: func(*cobra.Command, []string) error {
				n, err := a.c.PruneImages(a.ctx)
				if err != nil {
					return err
				}
				if a.json() {
					return a.writeJSON(map[string]int{"layersRemoved": n})
				}
				_, err = fmt.Fprintf(a.stdout, "removed %d layers\n", n)
				return err
			},
		},
	)
	return cmd
}

// printImage prints one image, or returns err.
func (a *app) printImage(info *sandbox.ImageInfo, err error) error {
	if err != nil {
		return err
	}
	if a.json() {
		return a.writeJSON(info)
	}
	t := a.table()
	t.row("digest:", info.Digest)
	t.row("names:", strings.Join(info.Names, ", "))
	t.row("layers:", strconv.Itoa(info.Layers))
	t.row("sandboxes:", strconv.Itoa(info.Users))
	if info.WorkingDir != "" {
		t.row("workdir:", info.WorkingDir)
	}
	if info.User != "" {
		t.row("user:", info.User)
	}
	for _, e := range info.Env {
		t.row("env:", e)
	}
	return t.flush()
}

// shortDigest is the first 12 hex digits of a digest, as image lists show it.
func shortDigest(d string) string {
	h := strings.TrimPrefix(d, "sha256:")
	if len(h) > 12 {
		h = h[:12]
	}
	return h
}
