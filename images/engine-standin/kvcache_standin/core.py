"""What every stand-in engine shares: sizes, the store rounds, the JSON lines and /health."""

import hashlib
import json
import os
import re
import signal
import socket
import sys
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DEFAULT_TENANT = "default"


class ConfigError(Exception):
    """A configuration the real engine refuses at start-up."""


def env_number(name, default, minimum):
    raw = os.environ.get(name, "")
    if raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number") from None
    if value < minimum:
        raise ConfigError(f"{name}={raw!r} must be at least {minimum}")
    return value


_SIZE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)\s*(gb|mb|kb|b)?$")
_UNITS = {"b": 1, "kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30}


def parse_size(value, what):
    """An int, or a string such as "16777216", "256MB" or "1.5gb" (binary multiples), as the
    Mooncake readers of both engines accept."""
    if isinstance(value, bool):
        raise ConfigError(f"{what}: {value!r} is not a size")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if not isinstance(value, str):
        raise ConfigError(f"{what}: unsupported type {type(value).__name__} for a size")
    m = _SIZE.match(value.strip().lower())
    if not m:
        raise ConfigError(f"{what}: invalid size {value!r}")
    return int(float(m.group(1)) * _UNITS[m.group(2) or "b"])


def normalize_tenant(value, what):
    """None or blank means the default tenant; anything else must be a string."""
    if value is None:
        return DEFAULT_TENANT
    if not isinstance(value, str):
        raise ConfigError(f"{what}: tenant_id must be a string, not {type(value).__name__}")
    return value.strip() or DEFAULT_TENANT


def own_address(master):
    """The address this Pod reaches the master from (its Pod IP in a cluster): what an engine
    registers as its local hostname when the configuration leaves it out."""
    host, _, port = master.rpartition(":")
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((host or master, int(port) if port.isdigit() else 9))
            return s.getsockname()[0]
    except OSError:
        return socket.gethostbyname(socket.gethostname())


@dataclass
class Settings:
    """The store client's configuration as the engine resolved it."""

    engine: str
    source: str
    local_hostname: str
    metadata_server: str
    master_server_address: str
    protocol: str
    device_name: str
    global_segment_size: int
    local_buffer_size: int
    tenant_id: str
    report: dict = field(default_factory=dict)

    def setup_args(self):
        args = {
            "local_hostname": self.local_hostname,
            "metadata_server": self.metadata_server,
            "global_segment_size": self.global_segment_size,
            "local_buffer_size": self.local_buffer_size,
            "protocol": self.protocol,
            "rdma_devices": self.device_name,
            "master_server_addr": self.master_server_address,
        }
        # The engines hand the tenant over only when it is not the default one.
        if self.tenant_id != DEFAULT_TENANT:
            args["tenant_id"] = self.tenant_id
        return args

    def describe(self):
        return {
            "engine": self.engine,
            "config_source": self.source,
            "master": self.master_server_address,
            "tenant": self.tenant_id,
            "protocol": self.protocol,
            "local_hostname": self.local_hostname,
            "metadata_server": self.metadata_server,
            "global_segment_size": self.global_segment_size,
            "local_buffer_size": self.local_buffer_size,
            **self.report,
        }


def emit(line):
    sys.stdout.write(json.dumps(line, sort_keys=True) + "\n")
    sys.stdout.flush()


def refuse(engine, err):
    """Exit the way an engine does on a configuration it rejects: non-zero, with the reason."""
    emit({"engine": engine, "ok": False, "stage": "config", "error": str(err)})
    print(f"{engine}: error: {err}", file=sys.stderr, flush=True)
    sys.exit(2)


class Health:
    """The readiness state /health reports: the outcome of the latest round."""

    def __init__(self):
        self._lock = threading.Lock()
        self._ok = False
        self._last = {"ok": False, "stage": "starting"}

    def set(self, ok, line):
        with self._lock:
            self._ok, self._last = ok, line

    def get(self):
        with self._lock:
            return self._ok, self._last


def serve_health(host, port, health, probe=None):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            path = self.path.split("?", 1)[0]
            if path == "/probe" and probe is not None:
                ok, last = True, probe()
            elif path == "/health":
                ok, last = health.get()
            else:
                self.send_error(404)
                return
            body = json.dumps(last, sort_keys=True).encode()
            self.send_response(200 if ok else 503)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass  # probes every few seconds would drown the JSON lines

    try:
        server = ThreadingHTTPServer((host, port), Handler)
    except OSError as e:
        raise ConfigError(f"cannot listen on {host}:{port}: {e}") from None
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def payload_for(key, size):
    """Bytes that differ per key, so a get that returned another key's value is caught."""
    seed = hashlib.sha256(key.encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


class Probe:
    """Objects put once and read back on demand (GET /probe), to count what a store keeps
    through an operation: every read is compared byte for byte with the bytes derived from its
    key, so another key's bytes count as wrong, not as kept."""

    def __init__(self, store, lock, count, size):
        self.store, self.lock, self.count, self.size = store, lock, count, size
        self.written = 0

    def key(self, i):
        return f"kvcache-probe/{i}"

    def put_all(self):
        for i in range(self.count):
            k = self.key(i)
            with self.lock:
                if self.store.put(k, payload_for(k, self.size)) == 0:
                    self.written += 1

    def __call__(self):
        kept = missing = wrong = 0
        for i in range(self.count):
            k = self.key(i)
            with self.lock:
                got = self.store.get(k)
            if not got:
                missing += 1
            elif got == payload_for(k, self.size):
                kept += 1
            else:
                wrong += 1
        return {"probe": True, "objects": self.count, "written": self.written, "kept": kept,
                "missing": missing, "wrong": wrong}


def run(settings, host, port):
    """Connect, then put and read back bytes every period until stopped. Exits non-zero when
    the first round never succeeds, as an engine fails its start-up."""
    try:
        period = env_number("KVCACHE_STANDIN_PERIOD", 5.0, 0.1)
        size = int(env_number("KVCACHE_STANDIN_PAYLOAD_BYTES", 65536, 1))
        rounds = int(env_number("KVCACHE_STANDIN_ROUNDS", 0, 0))
        attempts = int(env_number("KVCACHE_STANDIN_START_ATTEMPTS", 10, 1))
        probe_objects = int(env_number("KVCACHE_STANDIN_PROBE_OBJECTS", 0, 0))
        probe_bytes = int(env_number("KVCACHE_STANDIN_PROBE_BYTES", 65536, 1))
        health = Health()
    except ConfigError as e:
        refuse(settings.engine, e)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())

    from mooncake.store import MooncakeDistributedStore

    base = settings.describe()
    store = MooncakeDistributedStore()
    rc = store.setup(settings.setup_args())
    if rc != 0:
        emit({**base, "ok": False, "stage": "setup", "setup": rc})
        print(f"{settings.engine}: error: store setup returned {rc}", file=sys.stderr, flush=True)
        sys.exit(1)
    lock = threading.Lock()
    probe = Probe(store, lock, probe_objects, probe_bytes) if probe_objects else None
    try:
        serve_health(host, port, health, probe)
    except ConfigError as e:
        refuse(settings.engine, e)

    succeeded = 0
    failed_start = 0
    n = 0
    while not stop.is_set():
        n += 1
        key = f"kvcache-standin/{settings.engine}/{settings.local_hostname}/{os.getpid()}/{n}"
        payload = payload_for(key, size)
        with lock:
            put = store.put(key, payload)
            got = store.get(key) if put == 0 else b""
        ok = put == 0 and got == payload
        line = {**base, "round": n, "ok": ok, "stage": "put-get", "key": key, "bytes": size,
                "put": put, "get_bytes": len(got), "get_equal": got == payload}
        emit(line)
        health.set(ok, line)
        if ok:
            succeeded += 1
            if succeeded == 1 and probe is not None:
                probe.put_all()
                emit({**base, "stage": "probe-put", "probe_objects": probe.count, "probe_written": probe.written})
            if rounds and succeeded >= rounds:
                break
        elif succeeded == 0:
            failed_start += 1
            if failed_start >= attempts:
                print(f"{settings.engine}: error: {attempts} start-up puts failed (last put returned {put})",
                      file=sys.stderr, flush=True)
                store.close()
                sys.exit(1)
        stop.wait(period if succeeded else min(period, 2.0))
    store.close()
    sys.exit(0)
