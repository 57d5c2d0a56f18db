package engines

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

//go:generate go run ../hack/releasesgen

// Release is one engine release as measured from its distribution on PyPI (releases.json, which
// hack/engines.sh writes and test/readers checks against the release's own code; releases_gen.go
// is generated from it by `go generate ./engines/`).
type Release struct {
	// Engine is the engine's ID (vllm, sglang, vllm-ascend).
	Engine  string `json:"engine"`
	Version string `json:"version"`
	// Pin marks the release the reference was written against.
	Pin bool `json:"pin,omitempty"`
	// Supported: the release's own readers accept what injection writes, and its parser reads
	// the flags injection writes and refuses as admission reads them.
	Supported bool `json:"supported"`
	// Unsupported says why not, when Supported is false.
	Unsupported string `json:"unsupported,omitempty"`
	// Reader is the file of the distribution that defines the Mooncake store reader of the
	// injected configuration.
	Reader string `json:"reader"`
	// Dtypes are the --kv-cache-dtype spellings the release accepts, in its own order.
	Dtypes []string `json:"dtypes"`
	// DtypesChecked is where the release refuses another spelling: "argparse" (its choices) or
	// "config" (argparse takes any string; the engine's config check refuses it at start).
	DtypesChecked string `json:"dtypesChecked"`
	// Base is, on vLLM-Ascend, the vLLM release it runs in (its Dockerfile's VLLM_TAG), whose
	// parser reads the command line.
	Base string `json:"base,omitempty"`
	// Flags are the flags injection writes or refuses that the release's parser has, each with
	// its other spellings (aliases). A flag missing here is missing from the release.
	Flags map[string][]string `json:"flags"`
	// Client is the Mooncake client the engine's published image bundles.
	Client ReleaseClient `json:"client"`
	// Ran says how the release ran as a real engine against the store ("" when only its
	// readers and parser were run): the build and what it proved.
	Ran string `json:"ran,omitempty"`
}

// ReleaseClient is a bundled Mooncake client: its release ("" when nothing measured says it)
// and where that figure comes from.
type ReleaseClient struct {
	Version string `json:"version,omitempty"`
	Source  string `json:"source"`
}

// ReleaseEngine is what the table knows about an engine as a whole.
type ReleaseEngine struct {
	ID   string `json:"id"`
	PyPI string `json:"pypi"`
	// SDist: PyPI has only source distributions of it.
	SDist bool `json:"sdist,omitempty"`
	// Images are the repositories of the engine's published images, whose tags name the
	// release (v0.29.0).
	Images []string `json:"images"`
}

// ReleaseTable is releases.json.
type ReleaseTable struct {
	Measured string          `json:"measured"`
	Engines  []ReleaseEngine `json:"engines"`
	Releases []Release       `json:"releases"`
}

// ParseReleaseTable reads releases.json, checking what the lookups rely on: every release names
// a known engine and a version this package can order, each engine's releases ascend, and an
// unsupported release says why.
func ParseReleaseTable(data []byte) (ReleaseTable, error) {
	var t ReleaseTable
	if err := json.Unmarshal(data, &t); err != nil {
		return t, fmt.Errorf("releases.json: %w", err)
	}
	last := map[string]string{}
	for i := range t.Releases {
		r := &t.Releases[i]
		where := fmt.Sprintf("releases.json: releases[%d] (%s %s)", i, r.Engine, r.Version)
		if _, ok := ByID(r.Engine); !ok {
			return t, fmt.Errorf("%s: engine %q is none of vllm, sglang, vllm-ascend", where, r.Engine)
		}
		if _, ok := parseVersion(r.Version); !ok {
			return t, fmt.Errorf("%s: version %q is not a release such as 0.29.0 or 0.23.0.post1", where, r.Version)
		}
		if prev, ok := last[r.Engine]; ok && CompareVersions(prev, r.Version) >= 0 {
			return t, fmt.Errorf("%s: follows %s; list each engine's releases oldest first", where, prev)
		}
		last[r.Engine] = r.Version
		if !r.Supported && r.Unsupported == "" {
			return t, fmt.Errorf("%s: unsupported, and unsupported says no reason; say why injection does not support it", where)
		}
		if len(r.Dtypes) == 0 || r.Reader == "" || r.Client.Source == "" {
			return t, fmt.Errorf("%s: dtypes, reader and client.source are required (say \"unknown: ...\" where nothing measured says it)", where)
		}
	}
	return t, nil
}

// Releases are engine e's releases in the table, oldest first.
func (e Engine) Releases() []Release {
	var out []Release
	for _, r := range releaseTable {
		if r.Engine == e.ID {
			out = append(out, r)
		}
	}
	return out
}

// SupportedReleases are the versions of e that injection supports, oldest first.
func (e Engine) SupportedReleases() []string {
	var out []string
	for _, r := range e.Releases() {
		if r.Supported {
			out = append(out, r.Version)
		}
	}
	return out
}

// ReleaseStatus is what the table says of a version.
type ReleaseStatus string

// Release statuses.
const (
	// ReleaseSupported: in the table, and supported.
	ReleaseSupported ReleaseStatus = "supported"
	// ReleaseUnsupported: in the table and not supported, or older than every release read.
	ReleaseUnsupported ReleaseStatus = "unsupported"
	// ReleaseNewer: newer than the newest release read.
	ReleaseNewer ReleaseStatus = "newer"
	// ReleaseUnread: between releases read, and not one of them (a patch release, say).
	ReleaseUnread ReleaseStatus = "unread"
	// ReleaseUndeclared: no release is known (no version, or one that names no release).
	ReleaseUndeclared ReleaseStatus = "undeclared"
)

// ReleaseVerdict is the table's answer for one version of an engine.
type ReleaseVerdict struct {
	Engine  Engine
	Version string // as looked up, without a leading v
	Status  ReleaseStatus
	// PreReleaseOf is the release a pre-release or development release (0.30.0rc1) comes
	// before; "" for a release.
	PreReleaseOf string
	// Release is the release itself (supported, unsupported in the table), or the newest read
	// (newer); nil otherwise.
	Release *Release
}

// LookupRelease judges version (0.29.0, v0.29.0) of engine e against the table.
func (e Engine) LookupRelease(version string) ReleaseVerdict {
	v := ReleaseVerdict{Engine: e, Version: strings.TrimPrefix(version, "v"), Status: ReleaseUndeclared}
	rs := e.Releases()
	pv, ok := parseVersion(v.Version)
	if !ok || len(rs) == 0 {
		return v
	}
	if base, pre := pv.final(); pre {
		// A pre-release is not its release: nothing read proves it reads what the release
		// reads. A pre-release of a refused release is refused with it.
		v.PreReleaseOf = base
		for i := range rs {
			if CompareVersions(rs[i].Version, base) != 0 {
				continue
			}
			if !rs[i].Supported {
				v.Status, v.Release = ReleaseUnsupported, &rs[i]
			} else {
				v.Status = ReleaseUnread
			}
			return v
		}
	}
	for i := range rs {
		if CompareVersions(rs[i].Version, v.Version) == 0 {
			v.Release = &rs[i]
			v.Status = ReleaseSupported
			if !rs[i].Supported {
				v.Status = ReleaseUnsupported
			}
			return v
		}
	}
	switch {
	case CompareVersions(v.Version, rs[0].Version) < 0:
		v.Status = ReleaseUnsupported
	case CompareVersions(v.Version, rs[len(rs)-1].Version) > 0:
		v.Status, v.Release = ReleaseNewer, &rs[len(rs)-1]
	default:
		v.Status = ReleaseUnread
	}
	return v
}

// Dtypes are the --kv-cache-dtype spellings to judge a Binding's dtype by on this release: the
// release's own when the table has it (the newest read for a newer release, which is all that
// is known of it), else those every supported release accepts.
func (v ReleaseVerdict) Dtypes() []string {
	if v.Release != nil {
		return v.Release.Dtypes
	}
	var common []string
	first := true
	for _, r := range v.Engine.Releases() {
		if !r.Supported {
			continue
		}
		if first {
			common, first = slices.Clone(r.Dtypes), false
			continue
		}
		common = slices.DeleteFunc(common, func(d string) bool { return !slices.Contains(r.Dtypes, d) })
	}
	return common
}

// AcceptingReleases are the supported releases of e whose --kv-cache-dtype takes dtype.
func (e Engine) AcceptingReleases(dtype string) []string {
	var out []string
	for _, r := range e.Releases() {
		if r.Supported && slices.Contains(r.Dtypes, dtype) {
			out = append(out, r.Version)
		}
	}
	return out
}

// BundledClient is the Mooncake client release engine e's release version ships in its
// published image, and whether this project knows it (a leading v in version is ignored).
func (e Engine) BundledClient(version string) (string, bool) {
	v := e.LookupRelease(version)
	if v.Release == nil || v.Status == ReleaseNewer || v.Release.Client.Version == "" {
		return "", false
	}
	return v.Release.Client.Version, true
}

// ReaderModule is the Python module of a release's Mooncake reader (its import path), which an
// image must be able to import for the injected configuration to be read at all.
func (r Release) ReaderModule() string {
	return strings.ReplaceAll(strings.TrimSuffix(r.Reader, ".py"), "/", ".")
}

// ReaderModules says which module holds e's reader on which of its supported releases, newest
// first: "vllm.distributed.mooncake_store (0.31.0 to 0.33.0)".
func (e Engine) ReaderModules() []string {
	type span struct{ module, from, to string }
	var spans []span
	for _, r := range e.Releases() {
		if !r.Supported {
			continue
		}
		if n := len(spans); n > 0 && spans[n-1].module == r.ReaderModule() {
			spans[n-1].to = r.Version
			continue
		}
		spans = append(spans, span{r.ReaderModule(), r.Version, r.Version})
	}
	out := make([]string, 0, len(spans))
	for i := len(spans) - 1; i >= 0; i-- {
		out = append(out, fmt.Sprintf("%s (%s)", spans[i].module, versionSpan(spans[i].from, spans[i].to)))
	}
	return out
}

func versionSpan(from, to string) string {
	if from == to {
		return from
	}
	return from + " to " + to
}

// ImageRelease is the release an image of engine e names: the tag of one of the engine's
// published images (vllm/vllm-openai:v0.29.0 is vLLM 0.29.0), with a variant suffix after a
// dash ignored. "" for any other image, whose tag says nothing about the engine inside.
func (e Engine) ImageRelease(image string) string {
	repo := image
	if i := strings.Index(repo, "@"); i >= 0 {
		repo = repo[:i]
	}
	tag := ImageTag(image)
	repo = strings.TrimSuffix(repo, ":"+tag)
	repo = strings.TrimPrefix(strings.TrimPrefix(repo, "docker.io/"), "library/")
	if tag == "" || !slices.Contains(releaseImages[e.ID], repo) {
		return ""
	}
	m := imageTagRelease.FindStringSubmatch(tag)
	if m == nil {
		return ""
	}
	return m[1]
}

// imageTagRelease: v0.29.0, 0.5.18-cu129, v0.23.0.post1, v0.30.0rc1.
var imageTagRelease = regexp.MustCompile(`^v?([0-9]+\.[0-9]+\.[0-9]+(?:(?:a|b|rc)[0-9]+)?(?:\.post[0-9]+)?(?:\.dev[0-9]+)?)(?:-.*)?$`)

// version is a release's numbers, its stage (a development release of the final, alpha, beta,
// release candidate, or final) with the stage's number, its post-release, then its development
// mark (1: none) and number: ordered as PEP 440 orders them (0.29.0.dev1 < 0.29.0a1 <
// 0.29.0rc1.dev2 < 0.29.0rc1 < 0.29.0 < 0.29.0.post1).
type version []int

// Stages, in order; a final release sorts after its pre-releases.
const (
	stageDev = iota
	stageAlpha
	stageBeta
	stageRC
	stageFinal
)

var versionSyntax = regexp.MustCompile(`^([0-9]+)\.([0-9]+)\.([0-9]+)(?:(a|b|rc)([0-9]+))?(?:\.post([0-9]+))?(?:\.dev([0-9]+))?$`)

func parseVersion(s string) (version, bool) {
	m := versionSyntax.FindStringSubmatch(strings.TrimPrefix(s, "v"))
	if m == nil {
		return nil, false
	}
	num := func(i int) int {
		n, _ := strconv.Atoi(m[i])
		return n
	}
	stage := map[string]int{"a": stageAlpha, "b": stageBeta, "rc": stageRC, "": stageFinal}[m[4]]
	// A development release comes before what it develops: 0.29.0rc1.dev3 < 0.29.0rc1.
	dev, devN := 1, 0
	if m[7] != "" {
		dev, devN = 0, num(7)
		if m[4] == "" && m[6] == "" {
			stage = stageDev // 0.29.0.dev1 comes before 0.29.0a1
		}
	}
	return version{num(1), num(2), num(3), stage, num(5), num(6), dev, devN}, true
}

// final is the release a pre-release or development release comes before (0.29.0 of 0.29.0rc1,
// 0.23.0.post1 of 0.23.0.post1.dev2), and whether v is one.
func (v version) final() (string, bool) {
	if v[3] == stageFinal && v[6] == 1 {
		return "", false
	}
	base := fmt.Sprintf("%d.%d.%d", v[0], v[1], v[2])
	if v[3] == stageFinal && v[5] > 0 {
		base += fmt.Sprintf(".post%d", v[5])
	}
	return base, true
}

// CompareVersions orders two releases (0.23.0 < 0.23.0.post1 < 0.30.0); a string that is no
// release sorts first.
func CompareVersions(a, b string) int {
	va, oka := parseVersion(a)
	vb, okb := parseVersion(b)
	if !oka || !okb {
		return boolInt(oka) - boolInt(okb)
	}
	return slices.Compare(va, vb)
}

// The markers in docs/engines.md around the matrix MatrixMarkdown renders.
const (
	MatrixBegin = "<!-- releases: generated by `go generate ./engines/` from engines/releases.json; do not edit -->\n"
	MatrixEnd   = "<!-- end releases -->\n"
)

// StoreFit sorts the supported releases of the table by whether the Mooncake client each bundles
// is on the line of storeImage's master: fit on it, off it (with the client), or not known.
func StoreFit(t ReleaseTable, storeImage string) (line string, fit, off, unknown []string) {
	line, ok := MooncakeLine(ImageTag(storeImage))
	if !ok {
		return "", nil, nil, nil
	}
	for _, r := range t.Releases {
		if !r.Supported {
			continue
		}
		e, _ := ByID(r.Engine)
		name := e.Name + " " + r.Version
		client, known := MooncakeLine(r.Client.Version)
		switch {
		case r.Client.Version == "" || !known:
			unknown = append(unknown, name)
		case client == line:
			fit = append(fit, name)
		default:
			off = append(off, fmt.Sprintf("%s (Mooncake %s)", name, r.Client.Version))
		}
	}
	return line, fit, off, unknown
}

// MatrixMarkdown is the support matrix as docs/engines.md shows it, from the table t, and which
// releases fit storeImage, the default store.
func MatrixMarkdown(t ReleaseTable, storeImage string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s from each release's own code on PyPI (`engines/releases.json`; `hack/engines.sh` adds a release).\n\n", t.Measured)
	b.WriteString("| engine | release | injection | proven by | Mooncake reader | `--kv-cache-dtype` | flags injection writes and refuses | bundled Mooncake client |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, r := range t.Releases {
		e, _ := ByID(r.Engine)
		rel := r.Version
		if r.Pin {
			rel += " (pin)"
		}
		if r.Base != "" {
			rel += fmt.Sprintf(" on vLLM %s", r.Base)
		}
		support := "supported"
		if !r.Supported {
			support = "**refused**: " + r.Unsupported
		}
		checked := "argparse choices"
		if r.DtypesChecked == "config" {
			checked = "any string to argparse; the config check refuses others"
		}
		var flags []string
		for _, f := range slices.Sorted(maps.Keys(r.Flags)) {
			s := "`" + f + "`"
			if len(r.Flags[f]) > 0 {
				s += " (also `" + strings.Join(r.Flags[f], "`, `") + "`)"
			}
			flags = append(flags, s)
		}
		client := "unknown"
		if r.Client.Version != "" {
			client = r.Client.Version
		}
		proven := "its readers and parser"
		if r.Ran != "" {
			proven = "**a real engine**: " + r.Ran
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | `%s` | %d (%s): %s | %s | %s (%s) |\n",
			e.Name, rel, support, proven, r.Reader, len(r.Dtypes), checked, strings.Join(r.Dtypes, " "),
			strings.Join(flags, ", "), client, r.Client.Source)
	}
	if line, fit, off, unknown := StoreFit(t, storeImage); line != "" {
		fmt.Fprintf(&b, "\nWhich releases fit the default store image, `%s` (Mooncake %s; the Setting `kv-cache-backend-image`), by the client each bundles:\n\n", storeImage, line)
		none := func(l []string) string {
			if len(l) == 0 {
				return "none"
			}
			return strings.Join(l, ", ")
		}
		fmt.Fprintf(&b, "- on its line: %s;\n", none(fit))
		fmt.Fprintf(&b, "- on another line (admission warns of the skew, and every write would fail with RPC_FAIL (-900): give their backend a store image of their line, spec.image): %s;\n", none(off))
		fmt.Fprintf(&b, "- not known (admission warns; `pip show mooncake-transfer-engine` in the image says): %s.\n", none(unknown))
	}
	return b.String()
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
