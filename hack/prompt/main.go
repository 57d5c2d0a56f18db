// Command prompt shows the cache working between two real engines (`make playground` runs it):
// one long prompt to the first engine, which computes it and writes its blocks to the store;
// the same prompt to the second, which loads them; and a new prompt of the same length to the
// second, computed, for the time it takes without the store. Each engine's own prefix cache is
// emptied first (vLLM's /reset_prefix_cache), so every token served from cache came from the
// store. The figures are the engines' own counters (internal/enginetest).
//
//	go run ./hack/prompt -first http://10.244.0.7:8000 -second http://10.244.1.9:8000 [-words 1400] [-seed N]
//
// It exits 1 when the second engine loaded less than -min-share of the prompt from the store.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/kvcache-operator/kvcache/engines"
	"github.com/kvcache-operator/kvcache/internal/enginetest"
)

// cpuBlockTokens is vLLM's KV block on CPU: only whole blocks are stored and loaded.
const cpuBlockTokens = 128

func main() {
	first := flag.String("first", "", "the first engine, http://<Pod IP>:<port>")
	second := flag.String("second", "", "the second engine")
	firstName := flag.String("first-name", "the first engine", "how to name the first engine")
	secondName := flag.String("second-name", "the second engine", "how to name the second engine")
	words := flag.Int("words", 2000, "words in the prompt (about 1.1 tokens each: 2000 make some 2200 tokens, of which whole blocks of 128 cover more than 94%)")
	seed := flag.Uint64("seed", uint64(time.Now().Unix()), "the prompt's seed: a new one is a prompt the store has not seen")
	minShare := flag.Float64("min-share", 0.9, "the least share of the prompt the second engine must load from the store")
	flag.Parse()
	if *first == "" || *second == "" {
		fmt.Fprintln(os.Stderr, "prompt: -first and -second are required")
		os.Exit(2)
	}
	if err := run(*first, *second, *firstName, *secondName, *words, *seed, *minShare); err != nil {
		fmt.Fprintln(os.Stderr, "prompt:", err)
		os.Exit(1)
	}
}

func run(first, second, firstName, secondName string, words int, seed uint64, minShare float64) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	a := enginetest.Engine{Base: first, Engine: engines.VLLM}
	b := enginetest.Engine{Base: second, Engine: engines.VLLM}
	for _, e := range []enginetest.Engine{a, b} {
		if err := e.ResetPrefixCache(ctx); err != nil {
			return err
		}
	}
	prompt := enginetest.Prompt(seed, words)
	ra, err := a.Ask(ctx, prompt)
	if err != nil {
		return err
	}
	fmt.Printf("%s, a prompt the store has not seen: %s\n", firstName, ra)
	// The connector puts the prompt's blocks after the response: wait until they are written.
	put, err := a.WaitSaved(ctx, ra, cpuBlockTokens)
	if err != nil {
		return fmt.Errorf("%s did not finish writing the prompt's blocks to the store: %w", firstName, err)
	}
	fmt.Printf("%s wrote %d blocks of it to the store\n", firstName, put)
	rb, err := b.Ask(ctx, prompt)
	if err != nil {
		return err
	}
	fmt.Printf("%s, the same prompt:                %s\n", secondName, rb)
	rc, err := b.Ask(ctx, enginetest.Prompt(seed+1, words))
	if err != nil {
		return err
	}
	fmt.Printf("%s, a new prompt of the same length: %s (without the store's help)\n", secondName, rc)
	if rb.Share() < minShare {
		return fmt.Errorf("%s loaded %d of %d prompt tokens from the store (%.0f%%), less than %.0f%%", secondName, rb.StoreTokens, rb.PromptTokens, 100*rb.Share(), 100*minShare)
	}
	if rb.FirstToken > 0 {
		fmt.Printf("the store served %.1f%% of the prompt: first token after %s instead of %s (%.1fx faster)\n",
			100*rb.Share(), rb.FirstToken.Round(10*time.Millisecond), rc.FirstToken.Round(10*time.Millisecond), float64(rc.FirstToken)/float64(rb.FirstToken))
	}
	return nil
}
