// Command composecheck validates docker-compose.yaml and the Dockerfiles it builds without a
// Docker engine, with the libraries docker compose and docker build use themselves:
//
//   - compose-go loads the file as `docker compose config` would (schema validation,
//     interpolation with defaults, anchors and extension fields, depends_on conditions,
//     references to undeclared services, volumes and networks);
//   - BuildKit's Dockerfile parser, instruction parser and linter read every Dockerfile that a
//     service builds.
//
// On top of that it applies the project's own rules (see problems below) and prints a JSON
// summary of the stack on stdout. Environment variable values are never printed: only their
// names, whether they are interpolated, and which compose services they point at.
//
// Usage: composecheck [-os-env] [path/to/docker-compose.yaml]
//
// The project directory is the folder of the compose file. Interpolation sees only a `.env`
// file there (not the caller's environment, unless -os-env), so the check is the same on every
// machine and proves that every variable has a default. Exit status: 0 when the file loads and
// no problem is found, 1 otherwise (the JSON is still printed when the file loaded), 2 on usage
// errors.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	yaml "go.yaml.in/yaml/v4"
)

type port struct {
	Published string `json:"published,omitempty"`
	Target    uint32 `json:"target"`
	Protocol  string `json:"protocol,omitempty"`
	HostIP    string `json:"host_ip,omitempty"`
}

type dependency struct {
	Condition string `json:"condition"`
	Required  bool   `json:"required"`
}

type volume struct {
	Type     string `json:"type"`
	Source   string `json:"source,omitempty"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"read_only,omitempty"`
}

type build struct {
	Context    string `json:"context"`
	Dockerfile string `json:"dockerfile"`
}

// ref is a compose service that an environment variable's value names as a host.
type ref struct {
	Service string `json:"service"`
	Port    int    `json:"port,omitempty"`
	Scheme  string `json:"scheme,omitempty"`
}

type service struct {
	Image       string                `json:"image,omitempty"`
	Build       *build                `json:"build,omitempty"`
	Entrypoint  []string              `json:"entrypoint"`
	Command     []string              `json:"command"`
	Ports       []port                `json:"ports"`
	DependsOn   map[string]dependency `json:"depends_on"`
	Healthcheck bool                  `json:"healthcheck"`
	Restart     string                `json:"restart,omitempty"`
	Volumes     []volume              `json:"volumes"`
	// Names only, sorted.
	Environment []string `json:"environment"`
	// Names whose value in the file contains a ${...} interpolation.
	Interpolated []string `json:"environment_interpolated"`
	// Names whose value carries a secret (by name, URI credentials or a password field).
	Secrets []string `json:"environment_secrets"`
	// Compose services named as hosts in each variable's value (secrets are not inspected).
	Refs map[string][]ref `json:"environment_refs"`
}

type variable struct {
	Name       string `json:"name"`
	HasDefault bool   `json:"has_default"`
	// ${VAR:?message}: compose refuses to start until VAR is set (a secret without default).
	Required bool `json:"required"`
	Set      bool `json:"set"`
}

type stage struct {
	Name string `json:"name,omitempty"`
	Base string `json:"base"`
}

type dockerfile struct {
	Path         string   `json:"path"`
	Services     []string `json:"services"`
	Instructions int      `json:"instructions"`
	Stages       []stage  `json:"stages"`
	Warnings     []string `json:"warnings"`
}

type summary struct {
	Project     string             `json:"project"`
	ComposeFile string             `json:"compose_file"`
	Services    map[string]service `json:"services"`
	Networks    []string           `json:"networks"`
	Volumes     []string           `json:"volumes"`
	Variables   []variable         `json:"variables"`
	Dockerfiles []dockerfile       `json:"dockerfiles"`
	Problems    []string           `json:"problems"`
}

func main() {
	osEnv := flag.Bool("os-env", false, "let the caller's environment take part in interpolation")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: composecheck [-os-env] [docker-compose.yaml]")
		flag.PrintDefaults()
	}
	flag.Parse()
	file := "docker-compose.yaml"
	switch flag.NArg() {
	case 0:
	case 1:
		file = flag.Arg(0)
	default:
		flag.Usage()
		os.Exit(2)
	}
	out, err := check(context.Background(), file, *osEnv)
	if err != nil {
		fmt.Fprintf(os.Stderr, "composecheck: %s: %v\n", file, err)
		os.Exit(1)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		fmt.Fprintf(os.Stderr, "composecheck: %v\n", err)
		os.Exit(1)
	}
	if len(out.Problems) > 0 {
		for _, p := range out.Problems {
			fmt.Fprintf(os.Stderr, "composecheck: %s: %s\n", file, p)
		}
		fmt.Fprintf(os.Stderr, "composecheck: %d problem(s)\n", len(out.Problems))
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "composecheck: %s: %d services, %d Dockerfile(s), no problems\n",
		file, len(out.Services), len(out.Dockerfiles))
}

func check(ctx context.Context, file string, osEnv bool) (*summary, error) {
	abs, err := filepath.Abs(file)
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(abs)
	raw, err := os.ReadFile(abs)
	if err != nil {
		return nil, err
	}

	fns := []cli.ProjectOptionsFn{cli.WithWorkingDirectory(dir), cli.WithDotEnv}
	if osEnv {
		fns = append([]cli.ProjectOptionsFn{cli.WithOsEnv}, fns...)
	}
	opts, err := cli.NewProjectOptions([]string{abs}, fns...)
	if err != nil {
		return nil, err
	}
	// A required variable (${VAR:?...}) that is not set would stop the load: check the file
	// with a placeholder in its place, and report the variable as not set.
	placeholders := map[string]bool{}
	for _, v := range variables(raw, opts.Environment) {
		if v.Required && !v.Set {
			opts.Environment[v.Name] = "composecheck-placeholder"
			placeholders[v.Name] = true
		}
	}
	project, err := opts.LoadProject(ctx)
	if err != nil {
		return nil, fmt.Errorf("compose-go rejected the file: %w", err)
	}

	// The file as written (anchors and merge keys resolved, nothing interpolated), to see
	// which values come from ${...} and which are literals.
	var model map[string]any
	if err := yaml.Unmarshal(raw, &model); err != nil {
		return nil, fmt.Errorf("YAML: %w", err)
	}
	rawEnv := rawEnvironments(model)

	out := &summary{
		Project:     project.Name,
		ComposeFile: filepath.Base(abs),
		Services:    map[string]service{},
		Networks:    sortedKeys(project.Networks),
		Volumes:     sortedKeys(project.Volumes),
		Variables:   variables(raw, project.Environment),
		Dockerfiles: []dockerfile{},
		Problems:    []string{},
	}
	for i, v := range out.Variables {
		if placeholders[v.Name] {
			out.Variables[i].Set = false
			continue
		}
		if !v.HasDefault && !v.Required && !v.Set {
			out.problem("${%s} has no default and is not set: give it one (${%s:-dev-value}), "+
				"or require it (${%s:?message})", v.Name, v.Name, v.Name)
		}
	}

	names := project.ServiceNames()
	sort.Strings(names)
	builds := map[string][]string{}
	published := map[string]string{}
	for _, name := range names {
		s := project.Services[name]
		svc := summarize(dir, name, s, rawEnv[name], project.Services, out)
		out.Services[name] = svc
		if svc.Build != nil {
			path := filepath.Join(svc.Build.Context, svc.Build.Dockerfile)
			builds[path] = append(builds[path], name)
		}
		for _, p := range svc.Ports {
			if p.Published == "" {
				continue
			}
			key := p.HostIP + ":" + p.Published + "/" + p.Protocol
			if other, ok := published[key]; ok {
				out.problem("services %s and %s both publish host port %s", other, name, key)
			}
			published[key] = name
		}
	}

	paths := make([]string, 0, len(builds))
	for p := range builds {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		df, err := checkDockerfile(dir, p)
		if err != nil {
			return nil, err
		}
		df.Services = builds[p]
		for _, w := range df.Warnings {
			out.problem("%s: %s", p, w)
		}
		out.Dockerfiles = append(out.Dockerfiles, *df)
	}
	return out, nil
}

func (s *summary) problem(format string, args ...any) {
	s.Problems = append(s.Problems, fmt.Sprintf(format, args...))
}

func summarize(dir, name string, s types.ServiceConfig, raw map[string]string,
	all types.Services, out *summary,
) service {
	svc := service{
		Image:       s.Image,
		Entrypoint:  append([]string{}, s.Entrypoint...),
		Command:     append([]string{}, s.Command...),
		Ports:       []port{},
		DependsOn:   map[string]dependency{},
		Healthcheck: s.HealthCheck != nil && !s.HealthCheck.Disable,
		Restart:     s.Restart,
		Volumes:     []volume{},
		Environment: []string{},
		Refs:        map[string][]ref{},
	}
	if s.Build != nil {
		svc.Build = &build{Context: rel(dir, s.Build.Context), Dockerfile: s.Build.Dockerfile}
		if svc.Build.Dockerfile == "" {
			svc.Build.Dockerfile = "Dockerfile"
		}
		if s.Build.DockerfileInline != "" {
			out.problem("service %s: inline Dockerfiles are not checked", name)
		}
	}
	for _, p := range s.Ports {
		svc.Ports = append(svc.Ports, port{p.Published, p.Target, p.Protocol, p.HostIP})
	}
	for dep, d := range s.DependsOn {
		svc.DependsOn[dep] = dependency{d.Condition, d.Required}
		if d.Condition == types.ServiceConditionHealthy {
			if target, ok := all[dep]; ok && (target.HealthCheck == nil || target.HealthCheck.Disable) {
				out.problem("service %s waits for %s to be healthy, but %s has no healthcheck",
					name, dep, dep)
			}
		}
	}
	for _, v := range s.Volumes {
		src := v.Source
		if v.Type == types.VolumeTypeBind {
			src = rel(dir, src)
		}
		svc.Volumes = append(svc.Volumes, volume{v.Type, src, v.Target, v.ReadOnly})
	}
	for key, value := range s.Environment {
		svc.Environment = append(svc.Environment, key)
		rawValue, inFile := raw[key]
		if inFile && strings.Contains(stripEscapes(rawValue), "${") {
			svc.Interpolated = append(svc.Interpolated, key)
		}
		secret, literal := secretParts(key, rawValue)
		if secret {
			svc.Secrets = append(svc.Secrets, key)
			if literal {
				out.problem("service %s: %s holds a literal secret; use ${SOME_VAR:?message}",
					name, key)
			} else if withDefault.MatchString(stripEscapes(rawValue)) {
				out.problem("service %s: %s holds a secret with a default, which would be "+
					"usable by anyone who reads this file; require it with ${SOME_VAR:?message}",
					name, key)
			}
			continue
		}
		if value != nil {
			if refs := serviceRefs(*value, all); len(refs) > 0 {
				svc.Refs[key] = refs
			}
		}
	}
	sort.Strings(svc.Environment)
	sort.Strings(svc.Interpolated)
	sort.Strings(svc.Secrets)
	if svc.Interpolated == nil {
		svc.Interpolated = []string{}
	}
	if svc.Secrets == nil {
		svc.Secrets = []string{}
	}
	return svc
}

// --- secrets ---------------------------------------------------------------------------

var (
	secretName = regexp.MustCompile(
		`(?i)(PASSWORD|PASSWD|SECRET|TOKEN|FERNET|PRIVATE_KEY|API_KEY|ACCESS_KEY|CREDENTIAL)`)
	anyInterpolation = regexp.MustCompile(`\$\{[^}]*\}`)
	// scheme://user:password@host
	uriPassword = regexp.MustCompile(`://[^/:@\s]*:([^@\s]*)@`)
	// "password": "..." in JSON connection strings, password=... in key-value ones
	fieldPassword = regexp.MustCompile(
		`(?i)(?:^|[\s"{,;&?])(?:password|passwd|secret|token)"?\s*[:=]\s*("(?:[^"\\]|\\.)*"|[^,;&\s}]*)`)
	wholeInterpolation = regexp.MustCompile(`^\$\{[A-Za-z_][A-Za-z0-9_]*(?:(?::?[-?+])[^}]*)?\}$`)
)

// masked stands for one ${...} expression while looking for URI and field secrets.
const masked = "\x00"

// secretParts says whether a raw (uninterpolated) value carries a secret, and whether any
// secret part of it is a literal rather than one ${...} interpolation. An empty secret is
// not a literal (it means "unset").
// An interpolation with a default value (${VAR:-x} or ${VAR-x}).
var withDefault = regexp.MustCompile(`\$\{[A-Za-z_][A-Za-z0-9_]*:?-[^}]*\}`)

func secretParts(name, raw string) (secret, literal bool) {
	raw = stripEscapes(raw)
	if secretName.MatchString(name) {
		return true, raw != "" && !wholeInterpolation.MatchString(raw)
	}
	hidden := anyInterpolation.ReplaceAllString(raw, masked)
	parts := uriPassword.FindAllStringSubmatch(hidden, -1)
	parts = append(parts, fieldPassword.FindAllStringSubmatch(hidden, -1)...)
	for _, m := range parts {
		secret = true
		part := strings.Trim(m[1], `"`)
		if part != "" && part != masked {
			literal = true
		}
	}
	return secret, literal
}

// --- references to services ------------------------------------------------------------

var hostToken = regexp.MustCompile(`(?:([A-Za-z][A-Za-z0-9+.-]*)://)?([A-Za-z0-9_.-]+)(?::(\d{1,5}))?`)

func serviceRefs(value string, all types.Services) []ref {
	var refs []ref
	seen := map[ref]bool{}
	for _, m := range hostToken.FindAllStringSubmatchIndex(value, -1) {
		host := value[m[4]:m[5]]
		if _, ok := all[host]; !ok {
			continue
		}
		// The host must stand alone: at the start, after "//", "@", ",", a quote or a space.
		if m[4] > 0 && m[2] < 0 && !strings.ContainsAny(value[m[4]-1:m[4]], `/@, "'=`) {
			continue
		}
		r := ref{Service: host}
		if m[2] >= 0 {
			r.Scheme = value[m[2]:m[3]]
		}
		if m[6] >= 0 {
			r.Port, _ = strconv.Atoi(value[m[6]:m[7]])
		}
		if !seen[r] {
			seen[r] = true
			refs = append(refs, r)
		}
	}
	return refs
}

// --- interpolation variables -----------------------------------------------------------

var reference = regexp.MustCompile(
	`\$\{([A-Za-z_][A-Za-z0-9_]*)((?::?[-?+])[^}]*)?\}|\$([A-Za-z_][A-Za-z0-9_]*)`)

func stripEscapes(s string) string { return strings.ReplaceAll(s, "$$", "") }

// variables lists every ${VAR} the file interpolates, outside comments.
func variables(raw []byte, env types.Mapping) []variable {
	found := map[string]*variable{}
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		for _, m := range reference.FindAllStringSubmatch(stripEscapes(line), -1) {
			name, op := m[1], m[2]
			if name == "" {
				name = m[3]
			}
			v, ok := found[name]
			if !ok {
				_, set := env[name]
				v = &variable{Name: name, Set: set}
				found[name] = v
			}
			if strings.HasPrefix(op, ":-") || strings.HasPrefix(op, "-") {
				v.HasDefault = true
			}
			if strings.HasPrefix(op, ":?") || strings.HasPrefix(op, "?") {
				v.Required = true
			}
		}
	}
	out := make([]variable, 0, len(found))
	for _, v := range found {
		out = append(out, *v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// rawEnvironments returns each service's environment as written (list or mapping form).
func rawEnvironments(model map[string]any) map[string]map[string]string {
	out := map[string]map[string]string{}
	services, _ := model["services"].(map[string]any)
	for name, s := range services {
		env := map[string]string{}
		out[name] = env
		body, _ := s.(map[string]any)
		switch e := body["environment"].(type) {
		case map[string]any:
			for k, v := range e {
				if v != nil {
					env[k] = fmt.Sprint(v)
				}
			}
		case []any:
			for _, item := range e {
				k, v, _ := strings.Cut(fmt.Sprint(item), "=")
				env[k] = v
			}
		}
	}
	return out
}

// --- Dockerfiles ---------------------------------------------------------------------

func checkDockerfile(dir, path string) (*dockerfile, error) {
	f, err := os.Open(filepath.Join(dir, path))
	if err != nil {
		return nil, fmt.Errorf("Dockerfile of a service: %w", err)
	}
	defer f.Close()
	res, err := parser.Parse(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	df := &dockerfile{Path: path, Instructions: len(res.AST.Children), Warnings: []string{}}
	for _, w := range res.Warnings {
		df.Warnings = append(df.Warnings, w.Short)
	}
	lint := linter.New(&linter.Config{
		Warn: func(rule, _, _, msg string, loc []parser.Range) {
			line := 0
			if len(loc) > 0 {
				line = loc[0].Start.Line
			}
			df.Warnings = append(df.Warnings, fmt.Sprintf("line %d: %s: %s", line, rule, msg))
		},
	})
	stages, _, err := instructions.Parse(res.AST, lint)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(stages) == 0 {
		return nil, errors.New(path + ": no FROM")
	}
	for _, s := range stages {
		df.Stages = append(df.Stages, stage{Name: s.Name, Base: s.BaseName})
	}
	return df, nil
}

// --- helpers -------------------------------------------------------------------------

func rel(dir, path string) string {
	if r, err := filepath.Rel(dir, path); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return path
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
