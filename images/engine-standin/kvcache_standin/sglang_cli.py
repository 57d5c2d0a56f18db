"""`python3 -m sglang.launch_server`: the configuration SGLang 0.5.18's hicache Mooncake store
backend reads.

The backend hangs off the hierarchical cache (--enable-hierarchical-cache) and is chosen by
--hicache-storage-backend mooncake. Its settings come from the JSON file named by
SGLANG_HICACHE_MOONCAKE_CONFIG_PATH when that variable exists (even empty), otherwise from the
MOONCAKE_* environment. The local buffer is fixed at 16 MiB; MOONCAKE_LOCAL_BUFFER_SIZE is not
read.
"""

import argparse
import json
import os
import sys

from kvcache_standin import core

# SGLang 0.5.18's --kv-cache-dtype choices.
CACHE_DTYPES = ("auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4",
                "fp4_mx_block16", "fp4_e2m1")
STORAGE_BACKENDS = ("file", "mooncake", "hf3fs", "nixl", "aibrix", "dynamic")
LOCAL_BUFFER = 16 << 20
DEFAULT_SEGMENT = "4gb"
CONFIG_PATH_ENV = "SGLANG_HICACHE_MOONCAKE_CONFIG_PATH"


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python3 -m sglang.launch_server")
    p.add_argument("--model-path", "--model", required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--kv-cache-dtype", choices=CACHE_DTYPES, default="auto")
    p.add_argument("--enable-hierarchical-cache", action="store_true")
    p.add_argument("--hicache-storage-backend", choices=STORAGE_BACKENDS)
    p.add_argument("--hicache-storage-backend-extra-config")
    return p.parse_known_args(argv)


def from_file(path, report):
    if not path:
        raise core.ConfigError(f"{CONFIG_PATH_ENV} is set but empty")
    try:
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise core.ConfigError(f"Failed to load config from {path}: {e}") from None
    master = cfg.get("master_server_address", "")
    if not master:
        raise core.ConfigError(f"{path}: master_server_address is empty")
    return core.Settings(
        engine="sglang",
        source=f"{CONFIG_PATH_ENV}={path}",
        local_hostname=cfg.get("local_hostname", "localhost"),
        metadata_server=cfg.get("metadata_server", "P2PHANDSHAKE"),
        master_server_address=master,
        protocol=cfg.get("protocol", "rdma"),
        device_name=cfg.get("device_name", ""),
        global_segment_size=core.parse_size(cfg.get("global_segment_size", DEFAULT_SEGMENT), "global_segment_size"),
        local_buffer_size=LOCAL_BUFFER,
        tenant_id=core.normalize_tenant(cfg.get("tenant_id", core.DEFAULT_TENANT), "tenant_id"),
        report=report,
    )


def from_env(report):
    env = os.environ
    master = env.get("MOONCAKE_MASTER")
    if not master:
        raise core.ConfigError(
            "MOONCAKE_MASTER is not set: SGLang's Mooncake store backend needs the master's address")
    return core.Settings(
        engine="sglang",
        source="environment",
        local_hostname=env.get("MOONCAKE_LOCAL_HOSTNAME") or env.get("LOCAL_HOSTNAME", "localhost"),
        metadata_server=env.get("MOONCAKE_TE_META_DATA_SERVER", "P2PHANDSHAKE"),
        master_server_address=master,
        protocol=env.get("MOONCAKE_PROTOCOL", "rdma"),
        device_name=env.get("MOONCAKE_DEVICE", ""),
        global_segment_size=core.parse_size(env.get("MOONCAKE_GLOBAL_SEGMENT_SIZE", DEFAULT_SEGMENT),
                                            "MOONCAKE_GLOBAL_SEGMENT_SIZE"),
        local_buffer_size=LOCAL_BUFFER,
        tenant_id=core.normalize_tenant(env.get("MOONCAKE_TENANT_ID", core.DEFAULT_TENANT), "MOONCAKE_TENANT_ID"),
        report=report,
    )


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        args, ignored = parse_args(argv)
        if args.hicache_storage_backend != "mooncake":
            raise core.ConfigError(
                f"--hicache-storage-backend is {args.hicache_storage_backend!r}: the stand-in "
                "provides the mooncake backend only, and without it no KV bytes reach the store")
        if not args.enable_hierarchical_cache:
            raise core.ConfigError(
                "--hicache-storage-backend needs --enable-hierarchical-cache: the storage backend "
                "is a tier of the hierarchical cache, so without it the store is never used")
        report = {"model": args.model_path, "kv_cache_dtype": args.kv_cache_dtype, "ignored_args": ignored}
        if CONFIG_PATH_ENV in os.environ:
            settings = from_file(os.environ[CONFIG_PATH_ENV], report)
        else:
            settings = from_env(report)
    except core.ConfigError as e:
        core.refuse("sglang", e)
    except SystemExit as e:  # argparse: unknown dtype, missing --model-path
        if e.code:
            core.emit({"engine": "sglang", "ok": False, "stage": "config", "error": "invalid arguments (see stderr)"})
        raise
    core.run(settings, args.host, args.port)
