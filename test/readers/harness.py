"""Runs the released engines' own configuration readers over one injected container.

The readers come from the distributions hack/readers.sh unpacks (vLLM and SGLang wheels, the
vLLM-Ascend source release). Their modules import torch and the engines' runtime at the top, so
none is imported: each needed definition is taken out of the distribution's source file with
`ast` and executed alone, in a fresh module whose imports are the stdlib and the two packages
the venv holds (pydantic, regex). An import of anything else is left out: a name it would bind
that the extracted code mentions gets the literal its module assigns (a list of choices, read
without running that module), else an inert stand-in; the few stand-ins whose value matters
while a reader runs are listed in STANDINS below.
A definition missing from a distribution fails loudly (the file and name are reported), so a
new engine release cannot silently turn a check into a no-op.

Usage:
  harness.py --readers DIR CASE.json     check one container (CASE.json may be - for stdin)
  harness.py --readers DIR --facts       print what the readers accept, as JSON

CASE.json:
  {"name": "what to call it in messages (golden, document, container)",
   "engine": "vllm" | "vllm-ascend" | "sglang",
   "command": [...], "args": [...],      the container's, unexpanded
   "env": [{"name":..., "value":...} | {"name":..., "valueFrom": {"fieldRef": ...}}],
   "files": {"/abs/path": "content"},    what the container's volumes put at those paths
   "clientConfig": "...",                the annotation; the MOONCAKE_CONFIG_PATH file when
                                         "files" does not provide that path
   "pod": {"name":..., "namespace":..., "annotations": {...}, "labels": {...}}}

Exit status 0 and a JSON summary on stdout when every reader accepts; 1 with one line per
rejection on stderr, "<name>: <reader>: <the reader's own exception text>", otherwise; 2 when
the harness itself cannot run (bad input, a definition missing from a distribution).
"""

import argparse
import ast
import dataclasses
import importlib.util
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import types
import typing

# The Pod IP the kubelet would resolve status.podIP to; any address works, the readers keep it
# as a string.
FAKE_POD_IP = "10.244.0.9"
FAKE_HOST_IP = "10.0.0.9"

# Packages the extracted code may import for real: the standard library, and what
# hack/readers.sh installs into the venv.
INSTALLED = {"pydantic", "pydantic_core", "regex", "typing_extensions"}


class HarnessError(Exception):
    """The harness could not run a reader (not a verdict about the configuration)."""


class Rejected(Exception):
    """A reader refused the configuration; the message is the reader's own."""

    def __init__(self, reader, exc):
        if isinstance(exc, NameError):
            # Extracted code reached a name the harness did not take out with it: a harness
            # gap, never a verdict on the configuration.
            raise HarnessError(f"{reader}: {exc} (take that definition out too in test/readers/harness.py)")
        self.reader = reader
        text = str(exc) if str(exc) else repr(exc)
        text = " / ".join(line.strip() for line in text.splitlines() if line.strip())
        super().__init__(f"{reader}: {type(exc).__name__}: {text}")


class StandIn:
    """What a left-out import binds: any attribute or call yields another stand-in, so a module
    level reference to it (a decorator, an annotation, a default) executes. Code that depends on
    such a value at check time is never run; where a check needs the real value it is read from
    the distribution instead (see sglang_parser)."""

    def __init__(self, origin):
        self._origin = origin

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return StandIn(f"{self._origin}.{name}")

    def __call__(self, *args, **kwargs):
        return StandIn(f"{self._origin}()")

    def __iter__(self):
        return iter(())

    def __repr__(self):
        return f"<left out: {self._origin}>"


def _importable(module):
    top = module.split(".")[0]
    if top in sys.stdlib_module_names or top in INSTALLED:
        return importlib.util.find_spec(top) is not None
    return False


def _defined_names(node):
    """The names a top-level statement binds (for picking it by name)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, ast.Assign):
        out = set()
        for t in node.targets:
            for n in ast.walk(t):
                if isinstance(n, ast.Name):
                    out.add(n.id)
        return out
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return {node.target.id}
    if isinstance(node, ast.If):
        out = set()
        for child in node.body + node.orelse:
            out |= _defined_names(child)
        return out
    return set()


class Dist:
    """One unpacked distribution (a wheel's .py files, or a source release)."""

    def __init__(self, label, root):
        self.label = label
        self.root = root
        self._trees = {}

    def path(self, rel):
        return os.path.join(self.root, rel)

    def tree(self, rel):
        if rel not in self._trees:
            p = self.path(rel)
            try:
                with open(p, encoding="utf-8") as f:
                    src = f.read()
            except OSError as e:
                raise HarnessError(f"{self.label}: cannot read {rel}: {e} (rerun hack/readers.sh)")
            self._trees[rel] = ast.parse(src, p)
        return self._trees[rel]

    def load(self, rel, names=None, seed=None, methods=()):
        """Execute, in a new module, the top-level definitions of `rel` named in `names` (all of
        them when None), in source order, after the file's own importable imports; `seed` gives
        values for names a left-out import would have bound. `methods` ("Class.method") are
        lifted out of their class as plain functions. Returns the module."""
        tree = self.tree(rel)
        modname = "_readers." + re.sub(r"\W", "_", f"{self.label}.{rel}")
        mod = types.ModuleType(modname)
        mod.__file__ = self.path(rel)
        sys.modules[modname] = mod
        ns = mod.__dict__
        ns.update(seed or {})
        wanted = None if names is None else set(names)
        body, found, left_out = [], set(), []
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module == "__future__":
                body.insert(0, node)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                kept = self._importable_part(node)
                if kept is not None:
                    body.append(kept)
                if kept is not node:
                    left_out.append(node)
            elif isinstance(node, ast.Expr) and isinstance(getattr(node, "value", None), ast.Constant):
                continue  # docstring
            else:
                defined = _defined_names(node)
                if wanted is None or defined & wanted:
                    body.append(node)
                    found |= defined
        if wanted is not None and wanted - found:
            raise HarnessError(f"{self.label}: {rel} defines no {', '.join(sorted(wanted - found))} "
                               "(the reader moved in this release: update test/readers/harness.py)")
        lifted = [self._method(tree, rel, *m.split(".")) for m in methods]
        # Bind only the left-out names the extracted code mentions (annotations included).
        used = {n.id for part in body + lifted for n in ast.walk(part) if isinstance(n, ast.Name)}
        for node in left_out:
            for a in node.names:
                if isinstance(node, ast.ImportFrom):
                    name = a.asname or a.name
                    if name in used and name not in ns:
                        ns[name] = self._constant(node.module, a.name)
                elif not _importable(a.name):
                    name = a.asname or a.name.split(".")[0]
                    if name in used and name not in ns:
                        ns[name] = StandIn(a.name)
        code = compile(ast.Module(body=body + lifted, type_ignores=[]), self.path(rel), "exec")
        exec(code, ns)
        return mod

    def _importable_part(self, node):
        """The part of an import statement the venv can satisfy (the node itself when all of
        it), or None."""
        if isinstance(node, ast.ImportFrom):
            return node if node.level == 0 and _importable(node.module or "") else None
        keep = [a for a in node.names if _importable(a.name)]
        if len(keep) == len(node.names):
            return node
        return ast.Import(names=keep, lineno=node.lineno, col_offset=0) if keep else None

    def _constant(self, module, name):
        """What `from module import name` binds when module is left out: the literal value when
        the distribution's module assigns one to name (a list of choices, a default), read
        without running that module; a stand-in otherwise."""
        for rel in (module.replace(".", "/") + ".py", module.replace(".", "/") + "/__init__.py"):
            if os.path.exists(self.path(rel)):
                for node in self.tree(rel).body:
                    if isinstance(node, (ast.Assign, ast.AnnAssign)) and name in _defined_names(node) and node.value:
                        try:
                            return ast.literal_eval(node.value)
                        except ValueError:
                            break
                break
        return StandIn(f"{module}.{name}")

    def _method(self, tree, rel, cls, meth):
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == cls:
                for item in node.body:
                    if isinstance(item, ast.FunctionDef) and item.name == meth:
                        return item
        raise HarnessError(f"{self.label}: {rel} has no {cls}.{meth} (update test/readers/harness.py)")

    def literal_strings(self, rel, assign):
        """The string elements of a top-level `assign = Literal[...]`."""
        for node in self.tree(rel).body:
            if isinstance(node, ast.Assign) and assign in _defined_names(node):
                return [n.value for n in ast.walk(node.value) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
        raise HarnessError(f"{self.label}: {rel} defines no {assign}")

    def dict_keys(self, rel, assign, cls=None):
        """The string keys of the dict literal assigned to `assign` (at top level, or in the body
        of class `cls`), without evaluating its values (they name torch types or detectors)."""
        body = self.tree(rel).body
        if cls is not None:
            body = next((n.body for n in body if isinstance(n, ast.ClassDef) and n.name == cls), [])
        for node in body:
            target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
            value = getattr(node, "value", None)
            if isinstance(target, ast.Name) and target.id == assign and isinstance(value, ast.Dict):
                return [k.value for k in value.keys if isinstance(k, ast.Constant)]
        raise HarnessError(f"{self.label}: {rel} has no dict literal {cls + '.' if cls else ''}{assign}")

    def register_connector_calls(self, rel):
        """KVConnectorFactory.register_connector(name, module, class) calls anywhere in `rel`,
        in source order, as {name: (module, class)}."""
        out = {}
        for n in ast.walk(self.tree(rel)):
            if (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                    and n.func.attr == "register_connector" and len(n.args) == 3
                    and all(isinstance(a, ast.Constant) for a in n.args)):
                out[n.args[0].value] = (n.args[1].value, n.args[2].value)
        if not out:
            raise HarnessError(f"{self.label}: {rel} registers no connector")
        return out


# ---------------------------------------------------------------------------------------------
# The container's process environment.


class ContainerEnv:
    """Replaces os.environ with exactly the container's variables for the duration (the readers
    read os.environ; nothing of this process's own environment may leak in), and lays the files
    the container's volumes provide under a temporary root, rewriting a variable whose value is
    such a path to the file's new place."""

    def __init__(self, case):
        self.case = case
        self.tmp = tempfile.mkdtemp(prefix="kvcache-readers-")
        self.env = resolve_env(case)
        files = dict(case.get("files") or {})
        cfg_path = self.env.get("MOONCAKE_CONFIG_PATH")
        if cfg_path and cfg_path not in files and case.get("clientConfig") is not None:
            files[cfg_path] = case["clientConfig"]
        self.moved = {}
        for path, content in files.items():
            if not path.startswith("/"):
                raise HarnessError(f"files: {path!r} is not an absolute path")
            local = os.path.join(self.tmp, path.lstrip("/"))
            os.makedirs(os.path.dirname(local), exist_ok=True)
            with open(local, "w", encoding="utf-8") as f:
                f.write(content)
            self.moved[path] = local
        for k, v in self.env.items():
            if v in self.moved:
                self.env[k] = self.moved[v]

    def __enter__(self):
        self.saved = dict(os.environ)
        os.environ.clear()
        os.environ.update(self.env)
        return self

    def __exit__(self, *exc):
        os.environ.clear()
        os.environ.update(self.saved)
        shutil.rmtree(self.tmp, ignore_errors=True)
        return False


_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)|\$\$")


def _expand(s, env):
    """Kubernetes' $(VAR) expansion: a defined variable is substituted, an undefined reference
    stays as written, $$ escapes a dollar."""
    def sub(m):
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))
    return _REF.sub(sub, s)


def resolve_env(case):
    pod = case.get("pod") or {}
    fields = {
        "status.podIP": FAKE_POD_IP,
        "status.podIPs": FAKE_POD_IP,
        "status.hostIP": FAKE_HOST_IP,
        "status.hostIPs": FAKE_HOST_IP,
        "metadata.name": pod.get("name", ""),
        "metadata.namespace": pod.get("namespace", ""),
        "spec.nodeName": "node-0",
        "spec.serviceAccountName": "default",
    }
    env = {}
    for e in case.get("env") or []:
        name = e["name"]
        if "valueFrom" in e and e["valueFrom"]:
            ref = e["valueFrom"].get("fieldRef")
            if not ref:
                raise HarnessError(f"env {name}: only fieldRef sources can be resolved here, got {e['valueFrom']}")
            path = ref["fieldPath"]
            m = re.fullmatch(r"metadata\.(annotations|labels)\['(.+)'\]", path)
            if m:
                env[name] = (pod.get(m.group(1)) or {}).get(m.group(2), "")
            elif path in fields:
                env[name] = fields[path]
            else:
                raise HarnessError(f"env {name}: unknown fieldRef {path}")
        else:
            env[name] = _expand(e.get("value") or "", env)
    return env


def engine_argv(case, env):
    """command + args after Kubernetes' $(VAR) expansion: the tokens the engine's CLI may see."""
    return [_expand(t, env) for t in (case.get("command") or []) + (case.get("args") or [])]


def flag_value(argv, flag):
    """The value argparse would keep for `flag` (its last occurrence), or None."""
    value = None
    for i, tok in enumerate(argv):
        if tok == flag and i + 1 < len(argv):
            value = argv[i + 1]
        elif tok.startswith(flag + "="):
            value = tok[len(flag) + 1:]
    return value


# ---------------------------------------------------------------------------------------------
# vLLM (and the vLLM that vLLM-Ascend runs in).


# Names left-out imports bind that the extracted code calls while it is checked.
def _platform_standin():
    # KVTransferConfig.kv_buffer_device's default factory asks vllm.platforms for the device
    # type; the harness has no accelerator to detect.
    m = types.ModuleType("vllm.platforms")
    m.current_platform = types.SimpleNamespace(device_type="cuda")
    return m


STANDINS = {
    "vllm.platforms.current_platform.device_type": "cuda (KVTransferConfig.kv_buffer_device default)",
    "vllm_ascend ParallelConfig": "an empty class (only an annotation of MooncakeBackend.__init__)",
    "vllm_ascend logger": "a stdlib logger",
    "MooncakeBackend._setup_store": "not run (it connects to the store and the NPU transfer engine)",
}


class VLLM:
    WORKER = "vllm/distributed/kv_transfer/kv_connector/v1/mooncake/store/worker.py"
    KV_TRANSFER = "vllm/config/kv_transfer.py"
    CONFIG_UTILS = "vllm/config/utils.py"
    CACHE = "vllm/config/cache.py"
    ARG_UTILS = "vllm/engine/arg_utils.py"
    ARGPARSE_UTILS = "vllm/utils/argparse_utils.py"
    FACTORY = "vllm/distributed/kv_transfer/kv_connector/factory.py"
    TORCH_UTILS = "vllm/utils/torch_utils.py"

    def __init__(self, dist):
        self.dist = dist
        self._args = None
        self._kvt = None

    def arg_helpers(self):
        """vLLM's own CLI helpers: literal_to_kwargs (how a Literal field becomes argparse
        choices) and _expand_json_human_readable_numbers (applied to a JSON flag before pydantic
        validates it)."""
        if self._args is None:
            hr = self.dist.load(self.ARGPARSE_UTILS, ["human_readable_int"])
            self._args = self.dist.load(
                self.ARG_UTILS,
                ["T", "TypeHint", "TypeHintT", "is_type", "contains_type", "get_type",
                 "literal_to_kwargs", "_expand_json_human_readable_numbers"],
                seed={"human_readable_int": hr.human_readable_int})
        return self._args

    def kv_transfer_module(self):
        if self._kvt is None:
            utils = self.dist.load(self.CONFIG_UTILS, ["DataclassInstance", "ConfigType", "ConfigT", "config"])
            sys.modules.setdefault("vllm", types.ModuleType("vllm"))
            sys.modules["vllm.platforms"] = _platform_standin()
            self._kvt = self.dist.load(
                self.KV_TRANSFER,
                ["KVProducer", "KVConsumer", "KVRole", "kv_buffer_device_default_factory", "KVTransferConfig"],
                seed={"config": utils.config})
        return self._kvt

    def kv_roles(self):
        return list(typing.get_args(self.kv_transfer_module().KVRole))

    def connectors(self):
        return self.dist.register_connector_calls(self.FACTORY)

    def parse_kv_transfer_config(self, text):
        """What `--kv-transfer-config TEXT` becomes: vLLM expands human-readable numbers, then
        validates the JSON with pydantic's TypeAdapter over KVTransferConfig (extra keys are
        forbidden by vLLM's @config; __post_init__ checks kv_role)."""
        import pydantic
        expanded = self.arg_helpers()._expand_json_human_readable_numbers(text)
        return pydantic.TypeAdapter(self.kv_transfer_module().KVTransferConfig).validate_json(expanded)

    def dtype_choices(self):
        """--kv-cache-dtype's argparse choices, computed by vLLM's literal_to_kwargs from the type
        of CacheConfig.cache_dtype (the field the flag is generated from)."""
        mod = self.dist.load(self.CACHE, ["CacheDType"])
        ann = None
        for node in self.dist.tree(self.CACHE).body:
            if isinstance(node, ast.ClassDef) and node.name == "CacheConfig":
                for item in node.body:
                    if isinstance(item, ast.AnnAssign) and getattr(item.target, "id", "") == "cache_dtype":
                        ann = eval(compile(ast.Expression(item.annotation), self.CACHE, "eval"), mod.__dict__)
        if ann is None:
            raise HarnessError(f"{self.dist.label}: {self.CACHE} has no CacheConfig.cache_dtype")
        kwargs = self.arg_helpers().literal_to_kwargs({ann})
        if "choices" not in kwargs:
            raise HarnessError(f"{self.dist.label}: --kv-cache-dtype takes any string now ({kwargs})")
        return list(kwargs["choices"])

    def torch_dtype_keys(self):
        return self.dist.dict_keys(self.TORCH_UTILS, "STR_DTYPE_TO_TORCH_DTYPE")

    def store_config_module(self):
        return self.dist.load(
            self.WORKER,
            ["DEFAULT_GLOBAL_SEGMENT_SIZE", "DEFAULT_LOCAL_BUFFER_SIZE", "DEFAULT_TENANT_ID",
             "MooncakeMode", "MooncakeStoreConfig", "_normalize_tenant_id", "_parse_size"])


def check_kv_transfer(vllm, label, argv, connectors, want_connector):
    """Returns the validated --kv-transfer-config as a dict."""
    text = flag_value(argv, "--kv-transfer-config")
    if text is None:
        raise Rejected(f"{label} --kv-transfer-config", ValueError("the container passes no --kv-transfer-config"))
    try:
        cfg = vllm.parse_kv_transfer_config(text)
    except Exception as e:  # the reader's own error, whatever its type
        raise Rejected(f"{label} KVTransferConfig", e)
    if cfg.kv_connector not in connectors:
        raise Rejected(f"{label} KVConnectorFactory", KeyError(
            f"kv_connector {cfg.kv_connector!r} is not registered; registered: {sorted(connectors)}"))
    # The store connector, under any name registered for the same class (vLLM-Ascend keeps a
    # deprecated alias), is what reads MOONCAKE_CONFIG_PATH; another connector never would.
    if connectors[cfg.kv_connector] != connectors[want_connector]:
        names = sorted(n for n, target in connectors.items() if target == connectors[want_connector])
        raise Rejected(f"{label} KVConnectorFactory", ValueError(
            f"kv_connector {cfg.kv_connector!r} is {'.'.join(connectors[cfg.kv_connector])}, not this engine's "
            f"Mooncake store connector {'.'.join(connectors[want_connector])} (registered as {', '.join(names)})"))
    return {"kv_connector": cfg.kv_connector, "kv_role": cfg.kv_role,
            "kv_connector_extra_config": cfg.kv_connector_extra_config}


def check_dtype(label, argv, choices, where):
    dtype = flag_value(argv, "--kv-cache-dtype")
    if dtype is None:
        return None  # the engine's default ("auto") applies
    if dtype not in choices:
        raise Rejected(f"{label} --kv-cache-dtype", ValueError(
            f"argument --kv-cache-dtype: invalid choice: {dtype!r} (choose from {', '.join(choices)}; {where})"))
    return dtype


def run_vllm(case, dists):
    vllm = VLLM(dists["vllm"])
    label = f"vLLM {dists['vllm'].version}"
    out, errors = {}, []
    with ContainerEnv(case) as cenv:
        argv = engine_argv(case, cenv.env)
        try:
            mod = vllm.store_config_module()
            cfg = mod.MooncakeStoreConfig.load_from_config()
            out["MooncakeStoreConfig"] = dataclasses.asdict(cfg)
        except HarnessError:
            raise
        except Exception as e:
            errors.append(Rejected(f"{label} MooncakeStoreConfig.load_from_config ({VLLM.WORKER})", e))
    checks = {
        "kv_transfer_config": lambda: check_kv_transfer(vllm, label, argv, vllm.connectors(), "MooncakeStoreConnector"),
        "kv_cache_dtype": lambda: check_dtype(label, argv, vllm.dtype_choices(), f"CacheDType in {VLLM.CACHE}"),
    }
    run_checks(checks, out, errors)
    return out, errors


def run_checks(checks, out, errors):
    """Runs every check, keeping each result under its key and each rejection, so one run
    reports all that a Pod gets wrong."""
    for key, check in checks.items():
        try:
            out[key] = check()
        except Rejected as e:
            errors.append(e)


# ---------------------------------------------------------------------------------------------
# vLLM-Ascend.


class Ascend:
    BACKEND = "vllm_ascend/distributed/kv_transfer/kv_pool/ascend_store/backend/backend.py"
    MOONCAKE = "vllm_ascend/distributed/kv_transfer/kv_pool/ascend_store/backend/mooncake_backend.py"
    REGISTER = "vllm_ascend/distributed/kv_transfer/__init__.py"
    WORKER = "vllm_ascend/worker/worker.py"

    def __init__(self, dist):
        self.dist = dist

    def backend_module(self):
        base = self.dist.load(self.BACKEND, ["Backend"])
        return self.dist.load(
            self.MOONCAKE,
            ["DEFAULT_GLOBAL_SEGMENT_SIZE", "DEFAULT_LOCAL_BUFFER_SIZE", "_mooncake_setup_supports_ssd_offload",
             "_ssd_setup_kwargs", "MooncakeBackend", "MooncakeStoreConfig", "_parse_global_segment_size",
             "_convert_to_bytes"],
            seed={"Backend": base.Backend, "ParallelConfig": type("ParallelConfig", (), {}),
                  "logger": logging.getLogger("vllm_ascend")})

    def construct_backend(self):
        """MooncakeBackend.__init__ as the worker runs it: it loads MooncakeStoreConfig from
        MOONCAKE_CONFIG_PATH and refuses any protocol but "ascend". Only its last step, the store
        connection (_setup_store), is not run."""
        mod = self.backend_module()
        probe = type("MooncakeBackendProbe", (mod.MooncakeBackend,), {"_setup_store": lambda self: None})
        return probe(None)

    def connectors(self):
        return self.dist.register_connector_calls(self.REGISTER)

    def indexes_torch_dtypes(self):
        """Whether vLLM-Ascend's NPU worker looks a non-auto --kv-cache-dtype up in vLLM's
        STR_DTYPE_TO_TORCH_DTYPE (then a CLI choice missing from that table fails at start)."""
        src = ast.unparse(self.dist.tree(self.WORKER))
        return "STR_DTYPE_TO_TORCH_DTYPE[self.cache_config.cache_dtype]" in src


def ascend_dtype_choices(vllm, ascend):
    choices = vllm.dtype_choices()
    if not ascend.indexes_torch_dtypes():
        return choices, f"CacheDType in vLLM {vllm.dist.version} {VLLM.CACHE}"
    keys = set(vllm.torch_dtype_keys())
    return ([c for c in choices if c == "auto" or c in keys],
            f"vLLM {vllm.dist.version}'s CacheDType in {VLLM.CACHE}, less those its STR_DTYPE_TO_TORCH_DTYPE "
            f"({VLLM.TORCH_UTILS}) lacks, which {Ascend.WORKER} indexes")


def run_ascend(case, dists):
    ascend = Ascend(dists["vllm-ascend"])
    vllm = VLLM(dists["vllm-ascend-vllm"])
    label = f"vLLM-Ascend {ascend.dist.version}"
    out, errors = {}, []
    with ContainerEnv(case) as cenv:
        argv = engine_argv(case, cenv.env)
        try:
            backend = ascend.construct_backend()
            out["MooncakeStoreConfig"] = dataclasses.asdict(backend.config)
        except HarnessError:
            raise
        except Exception as e:
            errors.append(Rejected(f"{label} MooncakeBackend ({Ascend.MOONCAKE})", e))
    connectors = {**vllm.connectors(), **ascend.connectors()}  # vLLM-Ascend's plugin registers last
    choices, where = ascend_dtype_choices(vllm, ascend)
    checks = {
        "kv_transfer_config": lambda: check_kv_transfer(
            vllm, f"{label} on vLLM {vllm.dist.version}", argv, connectors, "AscendStoreConnector"),
        "kv_cache_dtype": lambda: check_dtype(label, argv, choices, where),
    }
    run_checks(checks, out, errors)
    return out, errors


# ---------------------------------------------------------------------------------------------
# SGLang.


class ArgparseError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse reports a bad command line by printing and exiting; the harness wants the text."""

    def error(self, message):
        raise ArgparseError(message)


class SGLang:
    ENVIRON = "sglang/srt/environ.py"
    STORE = "sglang/srt/mem_cache/storage/mooncake_store/mooncake_store.py"
    SERVER_ARGS = "sglang/srt/server_args.py"
    ARG_UTILS = "sglang/srt/arg_groups/arg_utils.py"
    ACTIONS = "sglang/srt/arg_groups/argparse_actions.py"
    CANARY = "sglang/kernels/ops/kv_canary/consts.py"
    REASONING = "sglang/srt/parser/reasoning_parser.py"
    TOOLS = "sglang/srt/function_call/function_call_parser.py"
    COMMON = "sglang/srt/utils/common.py"
    CUDA_GRAPH = "sglang/srt/model_executor/cuda_graph_config.py"

    def __init__(self, dist):
        self.dist = dist
        self._server_args = None

    def environ(self):
        # Loaded whole: it imports only the standard library, and reads os.environ lazily.
        return self.dist.load(self.ENVIRON)

    def store_module(self, envs):
        return self.dist.load(
            self.STORE,
            ["logger", "DEFAULT_LOCAL_BUFFER_SIZE", "DEFAULT_TENANT_ID", "_parse_global_segment_size",
             "_normalize_tenant_id", "MooncakeStoreConfig"],
            seed={"envs": envs}, methods=["MooncakeBaseStore._load_config"])

    def server_args(self):
        """server_args.py executed whole (module constants, helpers, ServerArgs), with
        SGLang's real arg_groups helpers and environ; its other imports are stand-ins, except
        the three whose values shape argparse choices, read from the distribution: the KV
        canary modes (a stdlib-only module, loaded) and the reasoning and tool-call parser
        names (the keys of their registries)."""
        if self._server_args is None:
            arg_utils = self.dist.load(self.ARG_UTILS)
            actions = self.dist.load(self.ACTIONS)
            canary = self.dist.load(self.CANARY)
            reasoning = types.SimpleNamespace(DetectorMap=dict.fromkeys(
                self.dist.dict_keys(self.REASONING, "DetectorMap", cls="ReasoningParser")))
            tools = types.SimpleNamespace(ToolCallParserEnum=dict.fromkeys(
                self.dist.dict_keys(self.TOOLS, "ToolCallParserEnum", cls="FunctionCallParser")))
            # argparse type= functions and choice holders from modules that import torch: taken
            # out of them like the readers, so these flags' values are checked for real too.
            common = self.dist.load(self.COMMON, ["nullable_str", "human_readable_int"])
            graphs = self.dist.load(self.CUDA_GRAPH, ["Backend"])
            seed = {"envs": self.environ().envs, "ReasoningParser": reasoning, "FunctionCallParser": tools,
                    "RealKvHashMode": canary.RealKvHashMode, "nullable_str": common.nullable_str,
                    "human_readable_int": common.human_readable_int, "Backend": graphs.Backend}
            for name in ("NS", "A", "Arg", "add_cli_args_from_dataclass"):
                seed[name] = getattr(arg_utils, name)
            for name in dir(actions):
                if name.endswith("Action"):
                    seed[name] = getattr(actions, name)
            self._server_args = self.dist.load(self.SERVER_ARGS, seed=seed)
        return self._server_args

    def parser(self):
        """SGLang's own argparse, as prepare_server_args builds it. A flag whose type= or
        choices still come from a stand-in (json_list_type needs orjson, the CUDA graph config
        parser needs torch) takes any value; such flags are listed in `unchecked`."""
        p = _Parser(prog="sglang serve")
        self.server_args().ServerArgs.add_cli_args(p)
        self.unchecked = set()
        for a in p._actions:
            if isinstance(a.type, StandIn):
                a.type = None
                self.unchecked.update(a.option_strings)
            if isinstance(a.choices, StandIn):
                a.choices = None
                self.unchecked.update(a.option_strings)
        return p

    def dtype_choices(self):
        return list(self.parser()._option_string_actions["--kv-cache-dtype"].choices)


def sglang_engine_args(argv):
    """The tokens after SGLang's entry point (`-m sglang.launch_server`, or `sglang serve`),
    which is what prepare_server_args parses; None when the entry point is not on the command
    line (a script that forwards its arguments)."""
    for i, tok in enumerate(argv):
        if tok in ("sglang.launch_server", "sglang.launch_server.py") and i > 0 and argv[i - 1] == "-m":
            return argv[i + 1:]
        if os.path.basename(tok) == "sglang" and i + 1 < len(argv) and argv[i + 1] == "serve":
            return argv[i + 2:]
    return None


def run_sglang(case, dists):
    sg = SGLang(dists["sglang"])
    label = f"SGLang {sg.dist.version}"
    out, errors = {}, []
    with ContainerEnv(case) as cenv:
        argv = engine_argv(case, cenv.env)
        engine_args = sglang_engine_args(argv)
        if engine_args is None:
            engine_args = [_expand(t, cenv.env) for t in case.get("args") or []]
        parsed = None
        try:
            parser = sg.parser()
            used = sorted({t.split("=")[0] for t in engine_args} & sg.unchecked)
            if used:
                out["flags whose values were not checked"] = used
            parsed = parser.parse_args(engine_args)
            out["server_args"] = {k: getattr(parsed, k) for k in (
                "hicache_storage_backend", "hicache_storage_backend_extra_config", "kv_cache_dtype",
                "enable_hierarchical_cache", "disaggregation_mode", "disaggregation_decode_retraction_backup",
                "disaggregation_decode_enable_offload_kvcache")}
        except ArgparseError as e:
            errors.append(Rejected(f"{label} ServerArgs argparse ({SGLang.SERVER_ARGS})", e))
        storage_config = None
        if parsed is not None and parsed.hicache_storage_backend_extra_config:
            # HiCacheStorageConfig.extra_config is that flag's JSON; _load_config prefers it.
            storage_config = types.SimpleNamespace(extra_config=json.loads(parsed.hicache_storage_backend_extra_config))
        try:
            envs = sg.environ().envs
            store = sg.store_module(envs)
            cfg = store._load_config(None, storage_config)
            out["MooncakeStoreConfig"] = dataclasses.asdict(cfg)
        except HarnessError:
            raise
        except Exception as e:
            errors.append(Rejected(f"{label} MooncakeBaseStore._load_config ({SGLang.STORE})", e))
    if parsed is not None and parsed.hicache_storage_backend != "mooncake":
        errors.append(Rejected(f"{label} --hicache-storage-backend", ValueError(
            f"the storage backend is {parsed.hicache_storage_backend!r}, not 'mooncake': the MOONCAKE_* variables are never read")))
    return out, errors


# ---------------------------------------------------------------------------------------------


RUNNERS = {"vllm": run_vllm, "vllm-ascend": run_ascend, "sglang": run_sglang}


def load_dists(readers):
    try:
        with open(os.path.join(readers, "manifest.json")) as f:
            m = json.load(f)
    except OSError as e:
        raise HarnessError(f"{readers}: no manifest.json ({e}): run hack/readers.sh")

    def dist(label, entry):
        d = Dist(f"{label}-{entry['version']}", os.path.join(readers, entry["root"]))
        d.version = entry["version"]
        return d

    return {"vllm": dist("vllm", m["vllm"]), "sglang": dist("sglang", m["sglang"]),
            "vllm-ascend": dist("vllm-ascend", m["vllm-ascend"]),
            "vllm-ascend-vllm": dist("vllm", m["vllm-ascend"]["vllm"])}


def _dataclass_fields(cls):
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = "<factory>"
        else:
            out[f.name] = "<required>"
    return out


def _file_keys(dist, rel, cls, meth):
    """Keys a loader reads with config.get("key", default): key -> default's source text."""
    for node in dist.tree(rel).body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == meth:
                    out = {}
                    for n in ast.walk(item):
                        if (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "get"
                                and n.args and isinstance(n.args[0], ast.Constant) and isinstance(n.args[0].value, str)
                                and isinstance(n.func.value, ast.Name) and n.func.value.id == "config"):
                            out[n.args[0].value] = ast.unparse(n.args[1]) if len(n.args) > 1 else "None"
                    return out
    raise HarnessError(f"{dist.label}: {rel} has no {cls}.{meth}")


def facts(dists):
    vllm = VLLM(dists["vllm"])
    avllm = VLLM(dists["vllm-ascend-vllm"])
    ascend = Ascend(dists["vllm-ascend"])
    sg = SGLang(dists["sglang"])
    achoices, awhere = ascend_dtype_choices(avllm, ascend)
    store = vllm.store_config_module()
    amod = ascend.backend_module()
    environ = sg.environ()
    smod = sg.store_module(environ.envs)
    mooncake_env = {name: getattr(environ.envs, name).default for name in dir(environ.envs)
                    if name.startswith("MOONCAKE_") or name == "SGLANG_HICACHE_MOONCAKE_CONFIG_PATH"}
    return {
        "vllm": {
            "version": vllm.dist.version,
            "kv_cache_dtype_choices": vllm.dtype_choices(),
            "kv_roles": vllm.kv_roles(),
            "connectors": sorted(vllm.connectors()),
            "MooncakeStoreConfig fields": _dataclass_fields(store.MooncakeStoreConfig),
            "from_file keys": _file_keys(vllm.dist, VLLM.WORKER, "MooncakeStoreConfig", "from_file"),
        },
        "vllm-ascend": {
            "version": ascend.dist.version,
            "vllm": avllm.dist.version,
            "kv_cache_dtype_choices": achoices,
            "kv_cache_dtype_source": awhere,
            "vllm CacheDType choices": avllm.dtype_choices(),
            "kv_roles": avllm.kv_roles(),
            "connectors (vllm-ascend registers)": {n: ".".join(t) for n, t in ascend.connectors().items()},
            "MooncakeStoreConfig fields": _dataclass_fields(amod.MooncakeStoreConfig),
            "from_file keys": _file_keys(ascend.dist, Ascend.MOONCAKE, "MooncakeStoreConfig", "from_file"),
        },
        "sglang": {
            "version": sg.dist.version,
            "kv_cache_dtype_choices": sg.dtype_choices(),
            "MooncakeStoreConfig fields": _dataclass_fields(smod.MooncakeStoreConfig),
            "environment (name: default)": mooncake_env,
        },
        "stand-ins": STANDINS,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--readers", required=True, help="the directory hack/readers.sh prints")
    ap.add_argument("--facts", action="store_true", help="print what the readers accept")
    ap.add_argument("case", nargs="?", help="CASE.json, or - for stdin")
    a = ap.parse_args()
    try:
        dists = load_dists(a.readers)
        if a.facts:
            json.dump(facts(dists), sys.stdout, indent=2, default=str)
            print()
            return 0
        if not a.case:
            ap.error("give CASE.json (or - for stdin), or --facts")
        src = sys.stdin if a.case == "-" else open(a.case, encoding="utf-8")
        case = json.load(src)
        name = case.get("name") or "<unnamed case>"
        engine = case.get("engine")
        if engine not in RUNNERS:
            raise HarnessError(f"engine {engine!r}: want one of {sorted(RUNNERS)}")
        out, errors = RUNNERS[engine](case, dists)
    except HarnessError as e:
        print(f"harness: {e}", file=sys.stderr)
        return 2
    for e in errors:
        print(f"{name}: {e}", file=sys.stderr)
    json.dump({"name": name, "engine": engine, "accepted": not errors, "read": out}, sys.stdout, default=str)
    print()
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
