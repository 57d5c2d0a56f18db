"""The engine side of the end-to-end test: what vLLM's Mooncake connector does with the
projected mooncake.json, reduced to the store calls.

The configuration is read the way hack/MOONCAKE_NOTES.md section 5 measured it:
MooncakeConfig.load_from_env() reads the JSON file named by MOONCAKE_CONFIG_PATH, and the
store's setup() takes it with two keys renamed (device_name -> rdma_devices,
master_server_address -> master_server_addr), exactly as mc_store_rest_server does.

It puts PAYLOAD_BYTES bytes under KEY, reads them back, and while the client is still
connected reads the master's segment listing from E2E_ADMIN_URL (to show that a client with
global_segment_size 0 mounts no segment of its own). With E2E_MORE=N it then puts N more
values of the same size under KEY-1 .. KEY-N, reading each back only when E2E_READ_MORE=1 (a
read leases the object for the master's default_kv_lease_ttl, and a leased object is not
evicted), and reports each put's code in "more". It prints one JSON line and exits 0 unless
setup itself raised; the Go test judges the figures.
"""
import json
import os
import sys
import urllib.request

from mooncake.mooncake_config import MooncakeConfig
from mooncake.store import MooncakeDistributedStore

KEY = os.environ.get("E2E_KEY", "e2e-key")
PAYLOAD_BYTES = int(os.environ.get("E2E_PAYLOAD_BYTES", "1048576"))
MORE = int(os.environ.get("E2E_MORE", "0"))
READ_MORE = os.environ.get("E2E_READ_MORE") == "1"

cfg = MooncakeConfig.load_from_env()
setup_args = {
    "local_hostname": cfg.local_hostname,
    "metadata_server": cfg.metadata_server,
    "global_segment_size": cfg.global_segment_size,
    "local_buffer_size": cfg.local_buffer_size,
    "protocol": cfg.protocol,
    "rdma_devices": cfg.device_name or "",
    "master_server_addr": cfg.master_server_address,
    "tenant_id": cfg.tenant_id,
}
store = MooncakeDistributedStore()
result = {"setup_args": setup_args, "setup": store.setup(setup_args)}
if result["setup"] == 0:
    payload = (b"kv-bytes-" + cfg.tenant_id.encode() + b"-") * (PAYLOAD_BYTES // 16 + 1)
    payload = payload[:PAYLOAD_BYTES]
    result["put"] = store.put(KEY, payload)
    got = store.get(KEY)
    result["get_len"] = len(got)
    result["get_equal"] = got == payload
    admin = os.environ.get("E2E_ADMIN_URL")
    if admin:
        with urllib.request.urlopen(admin + "/get_segments_detail", timeout=5) as r:
            result["segments_while_connected"] = json.load(r)
    result["more"] = []
    for i in range(1, MORE + 1):
        result["more"].append(store.put(f"{KEY}-{i}", payload))
        if READ_MORE:
            store.get(f"{KEY}-{i}")
    store.close()
print(json.dumps(result), flush=True)
