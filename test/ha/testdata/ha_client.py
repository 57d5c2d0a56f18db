"""The engine side of the failover test: one long-lived MooncakeDistributedStore, as an engine
keeps one across a change of leader, driven line by line from stdin.

Configuration (env): HA_MASTER (host:port of the master), HA_TENANT (the tenant its puts are
charged to), HA_LOCAL_BUFFER (bytes). Like the engines' injected configuration: P2PHANDSHAKE
metadata, tcp, no segment of its own (global_segment_size 0).

Commands, one per line; each answers with one JSON line on stdout:
  put KEY SIZE   put SIZE bytes under KEY, then get KEY back:
                 {"op": "put", "key": KEY, "rc": <put's return>, "equal": <bytes came back>}
  get KEY        {"op": "get", "key": KEY, "len": <bytes returned; 0 is a miss>}
The first line is {"op": "setup", "rc": <setup's return>}; the client exits when stdin closes.
"""
import json
import os
import sys

from mooncake.store import MooncakeDistributedStore


def answer(**fields):
    print(json.dumps(fields), flush=True)


store = MooncakeDistributedStore()
rc = store.setup({
    "local_hostname": "127.0.0.1",
    "metadata_server": "P2PHANDSHAKE",
    "global_segment_size": 0,
    "local_buffer_size": int(os.environ["HA_LOCAL_BUFFER"]),
    "protocol": "tcp",
    "rdma_devices": "",
    "master_server_addr": os.environ["HA_MASTER"],
    "tenant_id": os.environ["HA_TENANT"],
})
answer(op="setup", rc=rc)
if rc != 0:
    sys.exit(1)
for line in sys.stdin:
    words = line.split()
    if not words:
        continue
    if words[0] == "put":
        key, size = words[1], int(words[2])
        unit = key.encode() + b"|"
        payload = (unit * (size // len(unit) + 1))[:size]
        put = store.put(key, payload)
        got = store.get(key) if put == 0 else b""
        answer(op="put", key=key, rc=put, equal=got == payload)
    elif words[0] == "get":
        answer(op="get", key=words[1], len=len(store.get(words[1])))
    else:
        answer(op=words[0], error="unknown command")
store.close()
