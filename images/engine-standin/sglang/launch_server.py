"""`python3 -m sglang.launch_server ...`: the stand-in SGLang server (kvcache_standin.sglang_cli)."""

from kvcache_standin.sglang_cli import main

if __name__ == "__main__":
    main()
