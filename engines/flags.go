package engines

import "strings"

// Parser describes how one engine's command-line parser recognises long flags.
type Parser struct {
	// VLLMStyle: the vLLM family's parser also accepts '_' for '-' in the part of a flag
	// name before the first '.', and a dotted member (--kv-transfer-config.kv_role=x) addresses
	// a field of a JSON-valued flag, so it is that flag. SGLang (VLLMStyle false) reads dash
	// forms only.
	VLLMStyle bool
	// Known lists every long flag of the engine this project knows of (including the owned
	// ones), used to decide whether an abbreviation is a unique prefix. argparse accepts any
	// unique prefix of a long option; an ambiguous prefix makes the engine exit with an error
	// at start (a loud failure, not a silent one).
	Known []string
	// Aliases maps another spelling the parser registers for a flag to the flag
	// (SGLang 0.5.23's --enable-hicache is --enable-hierarchical-cache): either spelling, and a
	// unique prefix of either, is that flag.
	Aliases map[string]string
}

// minAbbrev is the shortest abbreviation, in characters after "--", read as a flag. argparse
// itself has no minimum, but Known holds only the flag families that compete with the flags
// this project looks for, so a one- or two-character prefix ("--k", "--hi") that looks unique
// here is ambiguous in the real parser (--kv-*, --host, --help, ...).
const minAbbrev = 3

// name returns the long flag the parser reads token as, before abbreviations are resolved:
// the part before the first '=' and, on the vLLM family, with '_' read as '-' and a dotted
// member dropped. ok is false for anything that is not a long option (positionals, short
// options such as "-k" or "-tp", the bare "--").
func (p Parser) name(token string) (name string, ok bool) {
	if !strings.HasPrefix(token, "--") || len(token) == len("--") {
		return "", false
	}
	name, _, _ = strings.Cut(token, "=")
	if p.VLLMStyle {
		// vLLM's FlexibleArgumentParser rewrites '_' to '-' between "--" and the first '.',
		// then folds "--flag.member v" into "--flag {"member": v}".
		body, _, _ := strings.Cut(name[len("--"):], ".")
		name = "--" + strings.ReplaceAll(body, "_", "-")
	}
	return name, true
}

// Matches reports whether the parser reads token (one argv element such as "--kv-transfer-config",
// "--kv-transfer-config={...}", "--kv_transfer_config", "--kv-transfer-conf",
// "--kv-transfer-config.kv_role=kv_both") as the long flag `flag` (e.g. "--kv-transfer-config").
//
// An abbreviation matches when it is a proper prefix of flag, at least minAbbrev characters
// long, and a prefix of no other flag in Known; a name that equals another Known flag is that
// flag (argparse prefers an exact match), so "--hicache-storage-backend" is not
// "--hicache-storage-backend-extra-config". A longer different flag never matches
// ("--kv-cache-memory-bytes" is not "--kv-cache-dtype").
//
// An alias is the flag it stands for: an abbreviation shared only by a flag and its aliases is
// not ambiguous, since every reading names the same flag.
func (p Parser) Matches(token, flag string) bool {
	name, ok := p.name(token)
	if !ok {
		return false
	}
	if name == flag || p.Aliases[name] == flag {
		return true
	}
	if len(name) < len("--")+minAbbrev {
		return false
	}
	prefixOf := strings.HasPrefix(flag, name)
	for alias, of := range p.Aliases {
		prefixOf = prefixOf || of == flag && strings.HasPrefix(alias, name)
	}
	if !prefixOf {
		return false
	}
	for _, k := range p.Known {
		if k != flag && p.Aliases[k] != flag && strings.HasPrefix(k, name) {
			return false // ambiguous, or exactly another flag
		}
	}
	return true
}

// Find returns the indexes in argv of every token the parser reads as flag. Scanning stops at a
// bare "--" (everything after it is positional). Short options ("-k") never match a long flag.
//
// Every token before "--" is examined, values included: argparse reads any token that starts
// with "--" as an option, not as the value of the option before it. (On the vLLM family a
// dotted member written without '=' does consume the next token as its value; Find still
// reports that token if it spells flag, which errs towards refusing.)
func (p Parser) Find(argv []string, flag string) []int {
	var out []int
	for i, t := range argv {
		if t == "--" {
			break
		}
		if p.Matches(t, flag) {
			out = append(out, i)
		}
	}
	return out
}

// VLLMKnownFlags are the long flags of vLLM's `vllm serve` parser that share prefixes with the flags
// this project owns or refuses: the whole --kv-* family of vLLM's EngineArgs (the shortest
// abbreviation read, minAbbrev, of --kv-transfer-config, --kv-cache-dtype or --kv-offloading-size
// is "--kv-"; --kv-offloading-*, --kv-cache-metrics* and --kv-cache-dtype-skip-layers are later
// additions), and --config with the two flags sharing its first letters (vLLM 0.29 to 0.33).
// --kv-cache-dtype is itself a prefix of --kv-cache-dtype-skip-layers, and --config of
// --config-format, which is why an exact name must win.
var VLLMKnownFlags = []string{
	"--config",
	"--config-format",
	"--convert",
	"--kv-cache-dtype",
	"--kv-cache-dtype-skip-layers",
	"--kv-cache-memory-bytes",
	"--kv-cache-metrics",
	"--kv-cache-metrics-sample",
	"--kv-events-config",
	"--kv-offloading-backend",
	"--kv-offloading-size",
	"--kv-sharing-fast-prefill",
	"--kv-transfer-config",
}

// SGLangKnownFlags are likewise the flags for `python3 -m sglang.launch_server` (sglang/srt/server_args.py):
// the --hicache-* and --kv-* families, the hierarchical-cache switches, the PD-disaggregation
// flags a ModelDeployment renders or checks, --config and the flags sharing its first letters,
// and enough of the --enable-* and --disable-* families that a short abbreviation of one of
// those flags reads as ambiguous, as it is. --hicache-storage-backend is itself a prefix of
// --hicache-storage-backend-extra-config, which is why an exact name must win. There is no
// --enable-hierarchical-cache-ssd; --enable-hicache is its alias (SGLangAliases).
var SGLangKnownFlags = []string{
	"--config",
	"--constrained-json-disable-any-whitespace",
	"--constrained-json-whitespace-pattern",
	"--context-length",
	"--disable-radix-cache",
	"--disaggregation-bootstrap-port",
	"--disaggregation-decode-enable-offload-kvcache",
	"--disaggregation-decode-enable-radix-cache",
	"--disaggregation-decode-extra-slots",
	"--disaggregation-decode-polling-interval",
	"--disaggregation-decode-retraction-backup",
	"--disaggregation-ib-device",
	"--disaggregation-mode",
	"--disaggregation-transfer-backend",
	"--enable-cache-report",
	"--enable-hicache",
	"--enable-hierarchical-cache",
	"--enable-hisparse",
	"--enable-lmcache",
	"--enable-metrics",
	"--hicache-host-memory-mode",
	"--hicache-io-backend",
	"--hicache-mem-layout",
	"--hicache-ratio",
	"--hicache-size",
	"--hicache-storage-backend",
	"--hicache-storage-backend-extra-config",
	"--hicache-storage-prefetch-policy",
	"--hicache-storage-prefetch-retry-max-attempts",
	"--hicache-storage-prefetch-retry-poll-interval",
	"--hicache-write-policy",
	"--hierarchical-sparse-attention-extra-config",
	"--hisparse-config",
	"--kv-cache-dtype",
	"--kv-events-config",
}

// SGLangAliases are the other spellings SGLang's parser registers for a flag: SGLang 0.5.23 adds
// --enable-hicache for --enable-hierarchical-cache.
var SGLangAliases = map[string]string{"--enable-hicache": "--enable-hierarchical-cache"}
