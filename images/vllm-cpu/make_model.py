"""Writes the real engine image's model: a small Llama with seeded random weights and a byte-level
BPE tokenizer trained here on generated words, so nothing is ever downloaded from a hub.

KV reuse through the store depends on the token ids and the attention shapes, not on what the
weights learned: two engines serving this model compute the same blocks for the same prompt,
and the second one can only skip its prefill by loading the first one's blocks.

    python make_model.py OUT_DIR

Run with the image's own venv (torch, transformers, tokenizers), as hack/images.sh does; the
same inputs give the same files.
"""

import json
import random
import sys

# The shape: big enough that a prefill of a few thousand tokens takes seconds on a CPU (the
# difference a store hit makes has to be seen), small enough to start in well under a minute.
HIDDEN = 512
LAYERS = 4
HEADS = 8
INTERMEDIATE = 1408
VOCAB = 8000
MAX_POSITIONS = 4096
SEED = 20261204

# A corpus of generated words: syllables joined at random, written as sentences. Any text
# tokenizes (the tokenizer is byte-level); prompts made of the same syllables just take fewer
# tokens per character.
SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "zen", "dar", "kel", "mor", "pia", "sul", "tor", "ven"]


def words(rng, n):
    return [
        "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 4)))
        for _ in range(n)
    ]


def corpus(rng, lines):
    for _ in range(lines):
        yield " ".join(words(rng, rng.randint(8, 24))) + "."


def main(out):
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    rng = random.Random(SEED)
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(corpus(rng, 20000)), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        model_max_length=MAX_POSITIONS,
    )
    # vLLM's chat endpoint needs a template; completions (what the proof sends) do not use it.
    fast.chat_template = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
    fast.save_pretrained(out)

    torch.manual_seed(SEED)
    config = LlamaConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        max_position_embeddings=MAX_POSITIONS,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        torch_dtype="bfloat16",
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    with open(f"{out}/kvcache-model.json", "w") as f:
        json.dump(
            {
                "hidden": HIDDEN,
                "layers": LAYERS,
                "heads": HEADS,
                "vocab": tok.get_vocab_size(),
                "seed": SEED,
                "parameters": sum(p.numel() for p in model.parameters()),
            },
            f,
            sort_keys=True,
        )
        f.write("\n")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: make_model.py OUT_DIR")
    main(sys.argv[1])
