"""Stand-in for the SGLang package: only `python3 -m sglang.launch_server` exists (see
kvcache_standin)."""
