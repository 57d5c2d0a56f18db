package generator

import (
	"fmt"

	"github.com/kvcache-operator/kvcache/values"
)

// Renderer renders API objects into the Kubernetes objects that realise them. Build one per
// process with NewRenderer and share it.
type Renderer struct {
	templates *Templates
	decoder   decoder
	defaults  values.Defaults
	// fragments caches rendered engine fragments; see RenderFragment.
	fragments *fragmentCache
}

// NewRenderer parses the templates and the embedded defaults once.
func NewRenderer() (*Renderer, error) {
	e, err := ParseTemplates()
	if err != nil {
		return nil, err
	}
	d, err := values.Load()
	if err != nil {
		return nil, err
	}
	s, err := NewScheme()
	if err != nil {
		return nil, err
	}
	return &Renderer{templates: e, decoder: newDecoder(s), defaults: d, fragments: &fragmentCache{}}, nil
}

// Defaults are the constants the renderer uses (ports, sizes).
func (r *Renderer) Defaults() values.Defaults { return r.defaults }

// WebhookInput names where the admission webhooks are served.
type WebhookInput struct {
	// Name of both configurations.
	Name string
	// Namespace and Service of the manager; the manager's own namespace is excluded from the
	// Pod webhooks.
	Namespace string
	Service   string
	// CABundle is the base64-encoded CA of the serving certificate ("" to leave it to an
	// injector such as cert-manager).
	CABundle string
	// Labels and Annotations for both configurations.
	Labels      map[string]string
	Annotations map[string]string
}

// RenderWebhookConfigurations renders the Mutating- and ValidatingWebhookConfiguration from the
// same partial the Helm chart installs.
func (r *Renderer) RenderWebhookConfigurations(in WebhookInput) ([]Object, error) {
	out, err := r.templates.Execute("webhooks/webhooks.yaml", in)
	if err != nil {
		return nil, fmt.Errorf("render webhook configurations: %w", err)
	}
	objs, err := r.decoder.decodeAll("webhook configurations", out)
	if err != nil {
		return nil, err
	}
	SortObjects(objs)
	return objs, nil
}

// Decode reads a multi-document YAML stream of Kubernetes objects (core kinds and this API)
// strictly into typed objects, in stream order. source names the stream in errors.
func (r *Renderer) Decode(source string, stream []byte) ([]Object, error) {
	return r.decoder.decodeAll(source, stream)
}
