"""A real MooncakeDistributedStore driven line by line from stdin, for tests (see client.go).

Configuration (env): STORE_CLIENT_MASTER (host:port of the master's RPC), STORE_CLIENT_TENANT
and STORE_CLIENT_LOCAL_BUFFER (bytes). Like an engine: P2PHANDSHAKE metadata, tcp, no segment of
its own.

Each request is one JSON line; each answer one JSON line on stdout:
  {"op": "put", "keys": [...], "size": N}  -> {"op": "put", "rc": {KEY: <put's return>, ...}}
  {"op": "get", "keys": [...]}             -> {"op": "get", "got": {KEY: {"len": N, "sha256": HEX}}}
  {"op": "remove", "keys": [...]}          -> {"op": "remove", "rc": {KEY: <remove's return>, ...}}
A put stores payload(KEY, N); a get only reports what came back (a miss is len 0), so the test
judges the bytes with its own copy of payload. A put grants no lease; a get leases the object for
the master's default_kv_lease_ttl. The first line is {"op": "setup", "rc": <setup's return>}.
"""
import hashlib
import json
import os
import sys

from mooncake.store import MooncakeDistributedStore


def payload(key, size):
    # Must match Payload in client.go: the key, '|', the key's SHA-256 in hex and a newline,
    # repeated and cut at size, so a value returned for another key or shifted never matches.
    unit = key.encode() + b"|" + hashlib.sha256(key.encode()).hexdigest().encode() + b"\n"
    return (unit * (size // len(unit) + 1))[:size]


def answer(**fields):
    print(json.dumps(fields), flush=True)


store = MooncakeDistributedStore()
rc = store.setup("127.0.0.1", "P2PHANDSHAKE", 0, int(os.environ["STORE_CLIENT_LOCAL_BUFFER"]), "tcp", "",
                 os.environ["STORE_CLIENT_MASTER"], tenant_id=os.environ["STORE_CLIENT_TENANT"])
answer(op="setup", rc=rc)
if rc != 0:
    sys.exit(1)
for line in sys.stdin:
    if not line.strip():
        continue
    req = json.loads(line)
    if req["op"] == "put":
        answer(op="put", rc={k: store.put(k, payload(k, req["size"])) for k in req["keys"]})
    elif req["op"] == "get":
        got = {}
        for k in req["keys"]:
            v = store.get(k)
            got[k] = {"len": len(v), "sha256": hashlib.sha256(v).hexdigest()}
        answer(op="get", got=got)
    elif req["op"] == "remove":
        answer(op="remove", rc={k: store.remove(k) for k in req["keys"]})
    else:
        answer(op=req["op"], error="unknown op")
store.close()
