"""A stand-in for an inference engine's Mooncake KV cache client.

It starts like the engine (`vllm serve ...`, `python3 -m sglang.launch_server ...`), reads the
configuration the kvcache operator injects the way that engine's store client reads it, rejects
what that engine would reject, and then does what the engine's client does with the store:
connects with mooncake.store.MooncakeDistributedStore (tenant included), puts bytes under a key
and reads them back. It has no model and computes nothing.

Output: one JSON line per round on stdout (the first one is the outcome a test reads), repeated
every KVCACHE_STANDIN_PERIOD seconds (default 5) so the store keeps seeing writes. An HTTP
server on --port answers GET /health with 200 only after a round whose put and get succeeded.

Knobs (environment, so the engine's own command line stays the engine's):
  KVCACHE_STANDIN_PERIOD         seconds between rounds (default 5)
  KVCACHE_STANDIN_PAYLOAD_BYTES  bytes per put (default 65536)
  KVCACHE_STANDIN_ROUNDS         stop after this many successful rounds and exit 0 (default 0:
                                 never)
  KVCACHE_STANDIN_START_ATTEMPTS first-round attempts before giving up (default 10, one every 2 s:
                                 the engines fail their start-up the same way)
  KVCACHE_STANDIN_PROBE_OBJECTS  after the first round, put this many objects once (default 0);
                                 GET /probe reads them all back and counts kept, missing and
                                 wrong (another key's bytes) ones
  KVCACHE_STANDIN_PROBE_BYTES    bytes per probe object (default 65536)
"""
