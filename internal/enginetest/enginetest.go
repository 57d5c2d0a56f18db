// Package enginetest drives a real engine (the vLLM of hack/images.sh's vllm image) the way a
// user's client does, and reads what the engine itself counted: one prompt sent as a streamed
// completion, the time to its first token, and the change in the engine's own counters over the
// request (prompt tokens asked, tokens loaded from the store). test/cluster proves the cache
// with it and `make playground` prints what it measured; neither trusts a figure the operator
// computed.
package enginetest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kvcache-operator/kvcache/engines"
	"github.com/kvcache-operator/kvcache/operator/enginestats"
)

// Model is where the vllm image keeps its generated model (images/vllm-cpu/make_model.py).
const Model = "/opt/models/tiny-llama"

// syllables are make_model.py's: words made of them take few tokens each.
var syllables = []string{"ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "zen", "dar", "kel", "mor", "pia", "sul", "tor", "ven"}

// Prompt is a text of words words drawn from seed: the same seed gives the same prompt (and so
// the same blocks), another seed a prompt that shares no block with it.
func Prompt(seed uint64, words int) string {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var b strings.Builder
	fmt.Fprintf(&b, "Document %d.", seed)
	for i := 0; i < words; i++ {
		b.WriteByte(' ')
		for n := 1 + r.IntN(3); n > 0; n-- {
			b.WriteString(syllables[r.IntN(len(syllables))])
		}
		if r.IntN(12) == 0 {
			b.WriteByte('.')
		}
	}
	return b.String()
}

// Engine is one running engine, reached at Base (http://<Pod IP>:<port>).
type Engine struct {
	Base   string
	Engine engines.Engine
	HTTP   *http.Client
}

func (e Engine) client() *http.Client {
	if e.HTTP != nil {
		return e.HTTP
	}
	return &http.Client{Timeout: 5 * time.Minute}
}

// Result is one prompt's figures.
type Result struct {
	// PromptTokens is what the engine counted for the request (its usage and its counter agree).
	PromptTokens int
	// StoreTokens is the prompt tokens it loaded from the store (its own counter's increase).
	StoreTokens int
	// Written is what it wrote to the store for the request (blocks put), counted by the end
	// of the request: the connector's puts finish after the response, see WaitWritten.
	Written int
	// FirstToken is the time from sending the request to the first streamed token.
	FirstToken time.Duration
	// After is the engine's counters after the request.
	After enginestats.Counters
	// checked is the connector's save_exists count before the request (see WaitSaved).
	checked float64
}

// Share is the part of the prompt the store served.
func (r Result) Share() float64 {
	if r.PromptTokens == 0 {
		return 0
	}
	return float64(r.StoreTokens) / float64(r.PromptTokens)
}

func (r Result) String() string {
	return fmt.Sprintf("%d prompt tokens, %d from the store (%.1f%%), first token after %s",
		r.PromptTokens, r.StoreTokens, 100*r.Share(), r.FirstToken.Round(10*time.Millisecond))
}

// Counters reads the engine's own /metrics.
func (e Engine) Counters(ctx context.Context) (enginestats.Counters, error) {
	return (&enginestats.Scraper{}).Scrape(ctx, e.Engine, e.Base+"/metrics")
}

// storeOps reads what vLLM's Mooncake store connector counted of one operation (save_exists:
// the blocks it looked up before putting them; save_put: those it put).
func (e Engine) storeOps(ctx context.Context, operation string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.Base+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := e.client().Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0, err
	}
	var n float64
	for _, m := range families["vllm:mooncake_store_operation_keys_total"].GetMetric() {
		var op, status string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "operation":
				op = l.GetValue()
			case "status":
				status = l.GetValue()
			}
		}
		if op == operation && status == "ok" {
			n += m.GetCounter().GetValue()
		}
	}
	return n, nil
}

// Ask sends prompt as a streamed completion of one token and reads the engine's counters before
// and after it.
func (e Engine) Ask(ctx context.Context, prompt string) (Result, error) {
	before, err := e.Counters(ctx)
	if err != nil {
		return Result{}, err
	}
	checked, err := e.storeOps(ctx, "save_exists")
	if err != nil {
		return Result{}, err
	}
	body, _ := json.Marshal(map[string]any{
		"model": Model, "prompt": prompt, "max_tokens": 1, "temperature": 0, "stream": true,
		"stream_options": map[string]any{"include_usage": true},
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.Base+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		return Result{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	t0 := time.Now()
	resp, err := e.client().Do(req)
	if err != nil {
		return Result{}, fmt.Errorf("POST %s/v1/completions: %w", e.Base, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return Result{}, fmt.Errorf("POST %s/v1/completions: %s: %s", e.Base, resp.Status, msg)
	}
	res := Result{checked: checked}
	usage := -1
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || line == "[DONE]" {
			continue
		}
		var chunk struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
			Usage *struct {
				PromptTokens int `json:"prompt_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(line), &chunk); err != nil {
			return Result{}, fmt.Errorf("a streamed chunk that is not JSON: %q: %w", line, err)
		}
		if res.FirstToken == 0 && len(chunk.Choices) > 0 {
			res.FirstToken = time.Since(t0)
		}
		if chunk.Usage != nil {
			usage = chunk.Usage.PromptTokens
		}
	}
	if err := sc.Err(); err != nil {
		return Result{}, fmt.Errorf("read the stream of %s/v1/completions: %w", e.Base, err)
	}
	if res.FirstToken == 0 {
		return Result{}, fmt.Errorf("%s/v1/completions streamed no token", e.Base)
	}
	after, err := e.Counters(ctx)
	if err != nil {
		return Result{}, err
	}
	res.After = after
	res.PromptTokens = int(after.PromptTokens - before.PromptTokens)
	if usage >= 0 && usage != res.PromptTokens {
		return Result{}, fmt.Errorf("the engine's usage says %d prompt tokens, its counter moved by %d: another request ran meanwhile", usage, res.PromptTokens)
	}
	res.StoreTokens = int(after.StoreTokens - before.StoreTokens)
	res.Written = int(after.Written - before.Written)
	return res, nil
}

// WaitSaved waits until the engine's store connector handled the blocks of r it computed
// (blockTokens each): it looks every whole computed block up after the response (save_exists),
// and puts those the store lacks (save_put), which a block another engine wrote, or one the
// store kept, does not need. It returns how many it put.
func (e Engine) WaitSaved(ctx context.Context, r Result, blockTokens int) (int, error) {
	blocks := (r.PromptTokens - r.StoreTokens) / blockTokens
	before := r.After.Written - float64(r.Written)
	var checked float64
	for {
		var err error
		checked, err = e.storeOps(ctx, "save_exists")
		if err == nil && checked-r.checked >= float64(blocks) {
			break
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("the engine at %s looked up %g of the %d blocks it computed: %w", e.Base, checked-r.checked, blocks, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
	// The puts follow their lookups: the count is final once it stops moving.
	last := -1.0
	for {
		c, err := e.Counters(ctx)
		if err == nil && c.Written == last {
			return int(c.Written - before), nil
		}
		if err == nil {
			last = c.Written
		}
		select {
		case <-ctx.Done():
			return int(last - before), ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// ResetPrefixCache empties the engine's own prefix cache (vLLM's /reset_prefix_cache, served with
// VLLM_SERVER_DEV_MODE=1), so that what it serves from cache next can only come from the store.
func (e Engine) ResetPrefixCache(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.Base+"/reset_prefix_cache", nil)
	if err != nil {
		return err
	}
	resp, err := e.client().Do(req)
	if err != nil {
		return fmt.Errorf("POST %s/reset_prefix_cache: %w", e.Base, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("POST %s/reset_prefix_cache: %s: %s (the engine needs VLLM_SERVER_DEV_MODE=1)", e.Base, resp.Status, msg)
	}
	return nil
}
