package generator

import (
	"github.com/kvcache-operator/kvcache/values"
)

// Renderer renders API objects into the Kubernetes objects that realise them. Build one per
// process with NewRenderer and share it.
type Renderer struct {
	engine   *Engine
	decoder  decoder
	defaults values.Defaults
	// fragments caches rendered engine fragments; see RenderFragment.
	fragments *fragmentCache
}

// NewRenderer parses the templates and the embedded defaults once.
func NewRenderer() (*Renderer, error) {
	e, err := NewEngine()
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
	return &Renderer{engine: e, decoder: newDecoder(s), defaults: d, fragments: &fragmentCache{}}, nil
}

// Defaults are the constants the renderer uses (ports, sizes).
func (r *Renderer) Defaults() values.Defaults { return r.defaults }
