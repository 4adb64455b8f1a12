package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v4"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/client"
)

// templateFile is what `sbx template build -f FILE` reads, in YAML (or JSON, which is YAML too).
type templateFile struct {
	Name      string   `yaml:"name"`
	BaseImage string   `yaml:"baseImage"`
	Env       []string `yaml:"env"`
	Workdir   string   `yaml:"workdir"`
	Steps     []struct {
		Run  []string `yaml:"run"`
		File *struct {
			Path    string `yaml:"path"`
			Content string `yaml:"content"` // the file's text, or
			Source  string `yaml:"source"`  // a local file to send, relative to FILE
			Mode    string `yaml:"mode"`    // octal, as "0755"
		} `yaml:"file"`
	} `yaml:"steps"`
}

// readTemplateFile reads and checks the build file at path.
func readTemplateFile(path string) (client.TemplateBuild, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return client.TemplateBuild{}, err
	}
	var f templateFile
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return client.TemplateBuild{}, fmt.Errorf("%s: %v", path, err)
	}
	b := client.TemplateBuild{Name: f.Name, BaseImage: f.BaseImage, Env: f.Env, Workdir: f.Workdir}
	if b.Name == "" || b.BaseImage == "" {
		return b, fmt.Errorf("%s: name and baseImage are needed", path)
	}
	for i, st := range f.Steps {
		switch {
		case len(st.Run) > 0 && st.File == nil:
			b.Steps = append(b.Steps, client.TemplateStep{Run: st.Run})
		case st.File != nil && len(st.Run) == 0:
			tf := &client.TemplateFile{Path: st.File.Path, Content: []byte(st.File.Content)}
			if st.File.Source != "" {
				src := st.File.Source
				if !filepath.IsAbs(src) {
					src = filepath.Join(filepath.Dir(path), src)
				}
				if tf.Content, err = os.ReadFile(src); err != nil {
					return b, fmt.Errorf("%s: step %d: %v", path, i+1, err)
				}
			}
			if st.File.Mode != "" {
				m, err := strconv.ParseUint(st.File.Mode, 8, 32)
				if err != nil || m > 0o7777 {
					return b, fmt.Errorf("%s: step %d: mode %q is no octal file mode", path, i+1, st.File.Mode)
				}
				tf.Mode = uint32(m)
			}
			b.Steps = append(b.Steps, client.TemplateStep{File: tf})
		default:
			return b, fmt.Errorf("%s: step %d: one of run or file", path, i+1)
		}
	}
	return b, nil
}

// templateCmd is `sbx template`: build, list, inspect and remove templates (sbx create --template).
func (a *app) templateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "template",
		Short: "Build, list, inspect and remove templates",
		Long: `sbx template manages the templates sandboxes start from (sbx create --template REF).
A template is a name whose versions are snapshots: NAME runs its newest version, NAME@VERSION
and NAME@sha256:... pin one. A version is made by sbx template build, or by
sbx snapshot ID --name NAME.

A build file (YAML or JSON) names the base image and the steps run in a sandbox of it:

  name: tools
  baseImage: registry.example:5000/tools/busybox:1
  env: [MODE=ready]
  workdir: /app
  steps:
    - run: [mkdir, -p, /app]
    - file: {path: /app/hello.sh, content: "echo hello\n", mode: "0755"}
    - file: {path: /app/data.bin, source: ./data.bin}`,
		Example: `  sbx template build -f tools.yaml
  sbx template ls
  sbx create --template tools@2 --wait
  sbx template rm tools@1`,
	}
	var file string
	build := &cobra.Command{
		Use:   "build -f FILE",
		Short: "Build a new version of a template from a base image and steps",
		Args:  exactArgs(0, "no arguments (the build file is -f)"),
		RunE: func(*cobra.Command, []string) error {
			if file == "" {
				return fmt.Errorf("a build file is needed (-f FILE)")
			}
			b, err := readTemplateFile(file)
			if err != nil {
				return err
			}
			s := a.spin(fmt.Sprintf("building %s from %s: %d steps", b.Name, b.BaseImage, len(b.Steps)))
			t, err := a.c.BuildTemplate(a.ctx, b)
			s.Stop()
			return a.printTemplate(t, err)
		},
	}
	build.Flags().StringVarP(&file, "file", "f", "", "the build file (YAML or JSON)")
	cmd.AddCommand(build,
		&cobra.Command{
			Use:     "ls",
			Aliases: []string{"list"},
			Short:   "List the templates",
			Args:    exactArgs(0, "no arguments"),
			RunE: func(*cobra.Command, []string) error {
				list, err := a.c.Templates(a.ctx)
				if err != nil {
					return err
				}
				if a.json() {
					if list == nil {
						list = []sandbox.TemplateInfo{}
					}
					return a.writeJSON(list)
				}
				t := a.table("name", "versions", "newest", "digest", "sandboxes")
				for _, tp := range list {
					users := 0
					for _, v := range tp.Versions {
						users += v.Users
					}
					last := tp.Versions[len(tp.Versions)-1]
					t.row(tp.Name, strconv.Itoa(len(tp.Versions)), strconv.Itoa(last.Version), shortDigest(last.Digest), strconv.Itoa(users))
				}
				return t.flush()
			},
		},
		&cobra.Command{
			Use:   "inspect REF",
			Short: "Show a template's versions, or one (NAME@VERSION)",
			Args:  exactArgs(1, "a template name, NAME@VERSION or NAME@sha256:..."),
			RunE: func(_ *cobra.Command, args []string) error {
				t, err := a.c.Template(a.ctx, args[0])
				return a.printTemplate(t, err)
			},
		},
		&cobra.Command{
			Use:     "rm REF",
			Aliases: []string{"remove"},
			Short:   "Remove a template's versions, or one (refused while a sandbox runs on one)",
			Args:    exactArgs(1, "a template name, NAME@VERSION or NAME@sha256:..."),
			RunE: func(_ *cobra.Command, args []string) error {
				if err := a.c.DeleteTemplate(a.ctx, args[0]); err != nil {
					return err
				}
				if a.json() {
					return a.writeJSON(map[string]string{"template": args[0]})
				}
				a.printf("removed %s\n", args[0])
				return nil
			},
		},
	)
	return cmd
}

func (a *app) printTemplate(t *sandbox.TemplateInfo, err error) error {
	if err != nil {
		return err
	}
	if a.json() {
		return a.writeJSON(t)
	}
	tw := a.table("version", "digest", "created", "sandboxes")
	for _, v := range t.Versions {
		tw.row(t.Name+"@"+strconv.Itoa(v.Version), v.Digest, v.CreatedAt.Format("2006-01-02 15:04:05"), strconv.Itoa(v.Users))
	}
	return tw.flush()
}
