// Package templates holds the Go text templates (Helm dialect: sprig, include, required, toYaml,
// tpl) of every object this project renders, embedded so the binary carries them. It owns
// layout only: the generator package computes every value and decision and hands them in, the
// names of labels, variables and mounts included (.Names, from package vocab).
//
//   - store/: the managed Mooncake store (leader Deployment and Service, Lease RBAC, member
//     DaemonSets with the fabric partial, the tenant quota policy seed).
//   - engines/: the fragment each engine's container receives (vLLM family, SGLang) and the
//     vLLM family's client configuration document.
//   - modeldeployment/: a ModelDeployment's role Deployments and Services.
//   - webhooks/: the admission webhook configurations; the Helm chart renders the same partial
//     (with no Go values, so it spells the contract's label itself; a test pins it).
//
// Files whose names start with an underscore hold partials (`define`) and render nothing.
package templates

import "embed"

// FS holds every template, keyed by its path under this directory.
//
//go:embed all:store all:engines all:webhooks all:modeldeployment
var FS embed.FS
