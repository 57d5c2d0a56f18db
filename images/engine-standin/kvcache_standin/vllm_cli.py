"""`vllm serve`: the configuration vLLM 0.29's MooncakeStoreConnector reads.

The connector is chosen by --kv-transfer-config (JSON); the store client's settings come from the
JSON file named by MOONCAKE_CONFIG_PATH, with vLLM's defaults and checks (embedded mode, the
default, needs a segment of its own; standalone-store needs none). vLLM does not read
local_hostname: it registers the address it reaches the master from.
"""

import argparse
import json
import os
import sys

from kvcache_standin import core

# vLLM 0.29.0's --kv-cache-dtype choices (CacheDType).
CACHE_DTYPES = (
    "auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla",
    "turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc",
    "int4_per_token_head", "int8_per_token_head", "fp8_per_token_head", "nvfp4", "nvfp4_4over6",
)
KV_ROLES = ("kv_producer", "kv_consumer", "kv_both")
CONNECTOR = "MooncakeStoreConnector"
MODES = ("embedded", "standalone-store")
DEFAULT_SIZE = 4 << 30  # both sizes default to 4 GiB


def _dashes(args):
    """vLLM accepts --some_flag for --some-flag."""
    out = []
    for a in args:
        if a.startswith("--"):
            name, eq, value = a.partition("=")
            a = name.replace("_", "-") + eq + value
        out.append(a)
    return out


def parse_args(argv):
    if not argv or argv[0] != "serve":
        raise core.ConfigError("the stand-in implements `vllm serve` only")
    p = argparse.ArgumentParser(prog="vllm serve")
    p.add_argument("model_tag", nargs="?")
    p.add_argument("--model")
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--kv-transfer-config")
    p.add_argument("--kv-cache-dtype", choices=CACHE_DTYPES, default="auto")
    # Every other engine flag (tensor parallelism, memory utilisation, ...) means nothing
    # without a model; they are reported, not refused.
    args, ignored = p.parse_known_args(_dashes(argv[1:]))
    return args, ignored


def transfer_config(raw):
    if raw is None:
        raise core.ConfigError(
            "--kv-transfer-config is missing: vLLM would start without a KV connector and no KV "
            "bytes would reach the store")
    try:
        cfg = json.loads(raw)
    except json.JSONDecodeError as e:
        raise core.ConfigError(f"--kv-transfer-config is not JSON: {e}") from None
    if not isinstance(cfg, dict):
        raise core.ConfigError("--kv-transfer-config must be a JSON object")
    connector, role = cfg.get("kv_connector"), cfg.get("kv_role")
    if connector != CONNECTOR:
        raise core.ConfigError(f"kv_connector {connector!r}: the stand-in provides {CONNECTOR} only")
    if role is None:
        raise core.ConfigError("Please specify kv_role when kv_connector is set")
    if role not in KV_ROLES:
        raise core.ConfigError(f"Unsupported kv_role: {role}. Supported roles are {list(KV_ROLES)}")
    return cfg


def store_settings(report):
    path = os.environ.get("MOONCAKE_CONFIG_PATH", "")
    if not path:
        raise core.ConfigError(
            "MOONCAKE_CONFIG_PATH is not set: MooncakeStoreConnector reads the store's address "
            "and sizes from the JSON file it names")
    try:
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise core.ConfigError(f"MOONCAKE_CONFIG_PATH={path}: {e}") from None
    if not isinstance(cfg, dict):
        raise core.ConfigError(f"MOONCAKE_CONFIG_PATH={path}: not a JSON object")
    master = cfg.get("master_server_address", "")
    if not master:
        raise core.ConfigError(f"MOONCAKE_CONFIG_PATH={path}: master_server_address is empty")
    mode = cfg.get("mode", "embedded")
    segment = core.parse_size(cfg.get("global_segment_size", DEFAULT_SIZE), "global_segment_size")
    buffer = core.parse_size(cfg.get("local_buffer_size", DEFAULT_SIZE), "local_buffer_size")
    if mode not in MODES:
        raise core.ConfigError(f"unknown Mooncake mode: {mode!r}")
    if buffer <= 0:
        raise core.ConfigError("local_buffer_size must be > 0")
    if mode == "embedded" and segment == 0:
        raise core.ConfigError("embedded mode requires global_segment_size > 0")
    if mode == "standalone-store" and segment != 0:
        raise core.ConfigError("standalone-store mode requires global_segment_size == 0")
    report["mode"] = mode
    return core.Settings(
        engine="vllm",
        source=f"MOONCAKE_CONFIG_PATH={path}",
        local_hostname=core.own_address(master),
        metadata_server=cfg.get("metadata_server", ""),
        master_server_address=master,
        protocol=cfg.get("protocol", "rdma"),
        device_name=cfg.get("device_name", "") or "",
        global_segment_size=segment,
        local_buffer_size=buffer,
        tenant_id=core.normalize_tenant(cfg.get("tenant_id", core.DEFAULT_TENANT), "tenant_id"),
        report=report,
    )


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        args, ignored = parse_args(argv)
        kv = transfer_config(args.kv_transfer_config)
        report = {
            "model": args.model or args.model_tag,
            "kv_transfer_config": kv,
            "kv_cache_dtype": args.kv_cache_dtype,
            "ignored_args": ignored,
        }
        settings = store_settings(report)
    except core.ConfigError as e:
        core.refuse("vllm", e)
    except SystemExit as e:  # argparse: unknown dtype, bad port
        if e.code:
            core.emit({"engine": "vllm", "ok": False, "stage": "config", "error": "invalid arguments (see stderr)"})
        raise
    core.run(settings, args.host, args.port)
