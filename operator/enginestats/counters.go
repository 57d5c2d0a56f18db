// Package enginestats reads what the engines themselves count about the store: the prompt tokens
// each engine Pod was asked to prefill, how many of them it loaded from the store instead of
// computing them, and how much it wrote there. The master stores blocks and never sees a
// request, so a hit rate can only come from the engines' own /metrics.
//
// It owns the counter names of each engine (read from the released engines' sources: vLLM's
// v1 metrics loggers and its Mooncake store connector, SGLang's metrics collector), the bounded
// scrape of one Pod, and the arithmetic that turns the counters of Pods that come, restart and
// go into the figures of a window. It reads no cluster state: the caller says which Pods to
// scrape and where.
package enginestats

import (
	"fmt"
	"io"
	"slices"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kvcache-operator/kvcache/engines"
)

// Counters are one scrape of one engine: cumulative since the engine process started.
type Counters struct {
	// PromptTokens is every prompt token the engine was asked to prefill.
	PromptTokens float64
	// StoreTokens is the prompt tokens it loaded from the store instead of computing them.
	StoreTokens float64
	// QueriedTokens is the prompt tokens it looked up in the store (on vLLM, those its own
	// prefix cache did not hold); 0 where the engine does not count lookups.
	QueriedTokens float64
	// Written is what it wrote to the store: blocks put (vLLM) or tokens backed up (SGLang).
	Written float64
	// Requests is the requests it finished.
	Requests float64
	// Models are the model names its series carry, sorted.
	Models []string
}

// series names one counter: the family, and the label values its samples must carry.
type series struct {
	Family string
	Labels map[string]string
}

// spec is one engine's counters. A Prometheus client writes a counter named x as the family
// x_total, which is the name here.
type spec struct {
	prompt, store, queried, written, requests series
	// found is a family every engine started with its store connector publishes (vLLM:
	// always; SGLang: only with --enable-metrics).
	found string
}

// specOf is where each engine keeps the counters. vLLM-Ascend runs vLLM's metrics loggers
// (its connector is another, so no put counter of Mooncake's is read there).
func specOf(e engines.Engine) spec {
	switch e.ID {
	case engines.SGLang.ID:
		return spec{
			prompt:   series{Family: "sglang:prompt_tokens_total"},
			store:    series{Family: "sglang:cached_tokens_total", Labels: map[string]string{"cache_source": "storage"}},
			written:  series{Family: "sglang:backuped_tokens_total"},
			requests: series{Family: "sglang:num_requests_total"},
			found:    "sglang:prompt_tokens_total",
		}
	case engines.VLLMAscend.ID:
		return spec{
			prompt:   series{Family: "vllm:prompt_tokens_total"},
			store:    series{Family: "vllm:external_prefix_cache_hits_total"},
			queried:  series{Family: "vllm:external_prefix_cache_queries_total"},
			requests: series{Family: "vllm:request_success_total"},
			found:    "vllm:prompt_tokens_total",
		}
	default:
		return spec{
			prompt:   series{Family: "vllm:prompt_tokens_total"},
			store:    series{Family: "vllm:external_prefix_cache_hits_total"},
			queried:  series{Family: "vllm:external_prefix_cache_queries_total"},
			written:  series{Family: "vllm:mooncake_store_operation_keys_total", Labels: map[string]string{"operation": "save_put", "status": "ok"}},
			requests: series{Family: "vllm:request_success_total"},
			found:    "vllm:prompt_tokens_total",
		}
	}
}

// ErrNoCounters is wrapped by Parse's error for a page without the engine's counters: another
// program on that port, or an SGLang started without --enable-metrics.
var ErrNoCounters = fmt.Errorf("the page holds none of the engine's token counters")

// Parse reads an engine's /metrics page (Prometheus text format).
func Parse(e engines.Engine, r io.Reader) (Counters, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return Counters{}, fmt.Errorf("parse %s /metrics: %w", e.Name, err)
	}
	sp := specOf(e)
	if _, ok := families[sp.found]; !ok {
		hint := ""
		if e.ID == engines.SGLang.ID {
			hint = " (SGLang publishes them only when started with --enable-metrics)"
		}
		return Counters{}, fmt.Errorf("%s /metrics has no %s%s: %w", e.Name, sp.found, hint, ErrNoCounters)
	}
	models := map[string]bool{}
	sum := func(s series) float64 {
		if s.Family == "" {
			return 0
		}
		var total float64
	samples:
		for _, m := range families[s.Family].GetMetric() {
			for k, v := range s.Labels {
				if label(m, k) != v {
					continue samples
				}
			}
			if n := label(m, "model_name"); n != "" {
				models[n] = true
			}
			total += value(m)
		}
		return total
	}
	c := Counters{
		PromptTokens:  sum(sp.prompt),
		StoreTokens:   sum(sp.store),
		QueriedTokens: sum(sp.queried),
		Written:       sum(sp.written),
		Requests:      sum(sp.requests),
	}
	for n := range models {
		c.Models = append(c.Models, n)
	}
	slices.Sort(c.Models)
	return c, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// value is a sample's value whatever type the page declared it (an untyped page is read too).
func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}

// String is the counters in words, for logs.
func (c Counters) String() string {
	return fmt.Sprintf("prompt=%g store=%g queried=%g written=%g requests=%g models=%s",
		c.PromptTokens, c.StoreTokens, c.QueriedTokens, c.Written, c.Requests, strings.Join(c.Models, ","))
}
