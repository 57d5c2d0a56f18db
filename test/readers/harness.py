"""Runs the released engines' own configuration readers over one injected container.

The readers come from the distributions hack/readers.sh unpacks (vLLM and SGLang wheels, the
vLLM-Ascend source release). Their modules import torch and the engines' runtime at the top, so
none is imported: each needed definition is taken out of the distribution's source file with
`ast` and executed alone, in a fresh module whose imports are the stdlib and the packages the
venv holds (INSTALLED). An import of anything else is left out: a name it would bind that the
extracted code mentions gets the literal its module assigns (a list of choices, read without
running that module), on SGLang a module of its own that imports nothing else run whole (see
Dist.is_light), else an inert stand-in; the few stand-ins whose value matters
while a reader runs are listed in STANDINS below.
A definition missing from a distribution fails loudly (the file and name are reported), so a
new engine release cannot silently turn a check into a no-op.

Usage (RELEASE is ENGINE==VERSION; READER and BASE are the release's row of engines/releases.json):
  harness.py --readers DIR --release RELEASE --reader READER [--base BASE] CASES.json
                         check containers (CASES.json a list of cases, or - for stdin)
  harness.py --readers DIR --release RELEASE [--reader READER] [--base BASE] --facts [--flags F,...]
                         print what the release's code says, as JSON (the reader found by content
                         when READER is left out; vLLM-Ascend's own facts only without BASE)

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
INSTALLED = {"pydantic", "pydantic_core", "regex", "typing_extensions", "msgspec", "yaml"}


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
        # The files a check read: hack/readers.sh keeps these and deletes the rest.
        self.used = set()
        self.deep_imports = False
        self._loading = set()
        self._light = {}
        self._is_light = {}
        self._loads = 0

    def path(self, rel):
        return os.path.join(self.root, rel)

    def tree(self, rel):
        self.used.add(rel)
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
        # One module name per load: typing.get_type_hints resolves a class's annotations in
        # sys.modules[cls.__module__], so two loads of one file (two classes taken out of it)
        # must not share a name.
        self._loads += 1
        modname = "_readers." + re.sub(r"\W", "_", f"{self.label}.{rel}") + f"_{self._loads}"
        mod = types.ModuleType(modname)
        mod.__file__ = self.path(rel)
        sys.modules[modname] = mod
        ns = mod.__dict__
        ns.update(seed or {})
        body, left_out, defs = [], [], []
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
                defs.append(node)
        if names is None:
            body += defs
        else:
            # The named definitions and every top-level definition of the file they (or the
            # lifted methods) mention, transitively: a release that adds a helper needs no edit.
            by_name = {}
            for i, node in enumerate(defs):
                for n in _defined_names(node):
                    by_name.setdefault(n, []).append(i)
            missing = set(names) - set(by_name)
            if missing:
                raise HarnessError(f"{self.label}: {rel} defines no {', '.join(sorted(missing))} "
                                   "(the reader moved in this release: update engines/releases.json, or test/readers/harness.py)")
            pending = set(names) | {n.id for m in methods for n in ast.walk(self._method(tree, rel, *m.split("."))) if isinstance(n, ast.Name)}
            keep, seen = set(), set()
            while pending:
                n = pending.pop()
                if n in seen or n in ns:
                    continue
                seen.add(n)
                for i in by_name.get(n, []):
                    if i not in keep:
                        keep.add(i)
                        pending |= {x.id for x in ast.walk(defs[i]) if isinstance(x, ast.Name)}
            body += [defs[i] for i in sorted(keep)]
        lifted = [self._method(tree, rel, *m.split(".")) for m in methods]
        # Bind only the left-out names the extracted code mentions (annotations included).
        used = {n.id for part in body + lifted for n in ast.walk(part) if isinstance(n, ast.Name)}
        for node in left_out:
            for a in node.names:
                if isinstance(node, ast.ImportFrom):
                    name = a.asname or a.name
                    if name in used and name not in ns:
                        ns[name] = self._constant(node, a.name, rel)
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

    def module_rel(self, module):
        """The file of a dotted module name in this distribution, or None."""
        for rel in (module.replace(".", "/") + ".py", module.replace(".", "/") + "/__init__.py"):
            if os.path.exists(self.path(rel)):
                return rel
        return None

    def _resolve(self, node, from_rel):
        """The file and dotted name an ImportFrom in from_rel names (relative ones resolved
        against from_rel's package); the file is None when it is not in this distribution."""
        module = node.module or ""
        if node.level:
            pkg = os.path.dirname(from_rel).split("/")
            if node.level > 1:
                pkg = pkg[:len(pkg) - (node.level - 1)]
            module = ".".join(pkg + ([module] if module else []))
        return (self.module_rel(module) if module else None), module

    def _constant(self, node, name, from_rel):
        """What `from module import name` (node, in from_rel) binds when module is left out: with
        deep imports (SGLang, whose argument declarations live in modules of their own), the
        name from module executed whole when module is light (see is_light); the literal value
        when the module assigns one to name (a list of choices, a default), read without running
        it; with deep imports, a class or function defined there, taken out of it the same way;
        a stand-in otherwise."""
        rel, module = self._resolve(node, from_rel)
        if rel is None:
            return StandIn(f"{module}.{name}")
        if self.deep_imports and self.is_light(rel):
            light = self.light_module(rel)
            if light is not None and hasattr(light, name):
                return getattr(light, name)
        for n in self.tree(rel).body:
            if isinstance(n, (ast.Assign, ast.AnnAssign)) and name in _defined_names(n) and n.value:
                try:
                    return ast.literal_eval(n.value)
                except ValueError:
                    break
        key = (rel, name)
        if self.deep_imports and key not in self._loading and len(self._loading) < 8:
            if any(isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name == name for n in self.tree(rel).body):
                self._loading.add(key)
                try:
                    return getattr(self.load(rel, [name]), name)
                except Exception:  # noqa: BLE001 - a definition that cannot run alone stays a stand-in
                    pass
                finally:
                    self._loading.discard(key)
        return StandIn(f"{module}.{name}")

    def is_light(self, rel, depth=0):
        """Whether rel imports only the stdlib, the venv's packages and other light modules of
        this distribution: then it runs whole, for real. SGLang 0.5.20 on declares its arguments
        in such modules (arg_groups/fields/*), and checks field markers by identity, so each must
        run once and be shared, as Python's own import would."""
        if rel in self._is_light:
            return self._is_light[rel]
        self._is_light[rel] = False  # a module in an import cycle is not light
        ok = depth < 6
        for node in self.tree(rel).body if ok else []:
            if isinstance(node, ast.Import):
                ok = all(_importable(a.name) for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
                if not (node.level == 0 and _importable(node.module or "")):
                    target, _ = self._resolve(node, rel)
                    ok = target is not None and self.is_light(target, depth + 1)
            if not ok:
                break
        self._is_light[rel] = ok
        return ok

    def light_module(self, rel):
        """A light module executed whole, once; None when it does not run (then its names are
        taken out one by one)."""
        if rel not in self._light:
            self._light[rel] = None
            try:
                self._light[rel] = self.load(rel)
            except Exception:  # noqa: BLE001 - see the docstring
                self._light[rel] = None
        return self._light[rel]

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

    def __init__(self, dist, reader=WORKER):
        self.dist = dist
        self.reader = reader
        self._args = None
        self._kvt = None
        self.dtypes_checked = "argparse"

    def arg_helpers(self):
        """vLLM's own CLI helpers: literal_to_kwargs (how a Literal field becomes argparse
        choices) and, from vLLM 0.23.0 on, _expand_json_human_readable_numbers (applied to a JSON
        flag before pydantic validates it; older releases validate the JSON as written). Its
        human_readable_int sits in argparse_utils.py, or in arg_utils.py itself before 0.23.0."""
        if self._args is None:
            defined = {n for node in self.dist.tree(self.ARG_UTILS).body for n in _defined_names(node)}
            names = ["T", "TypeHint", "TypeHintT", "is_type", "contains_type", "get_type", "literal_to_kwargs"]
            seed = {}
            if "_expand_json_human_readable_numbers" in defined:
                names.append("_expand_json_human_readable_numbers")
                if "human_readable_int" not in defined:
                    seed["human_readable_int"] = self.dist.load(self.ARGPARSE_UTILS, ["human_readable_int"]).human_readable_int
            self._args = self.dist.load(self.ARG_UTILS, names, seed=seed)
        return self._args

    def kv_transfer_module(self):
        if self._kvt is None:
            utils = self.dist.load(self.CONFIG_UTILS, ["DataclassInstance", "ConfigType", "ConfigT", "config"])
            sys.modules.setdefault("vllm", types.ModuleType("vllm"))
            sys.modules["vllm.platforms"] = _platform_standin()
            self._kvt = self.dist.load(
                self.KV_TRANSFER,
                ["KVRole", "KVTransferConfig"],  # with what they mention, as in every release
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
        expand = getattr(self.arg_helpers(), "_expand_json_human_readable_numbers", None)
        if expand is not None:
            text = expand(text)
        return pydantic.TypeAdapter(self.kv_transfer_module().KVTransferConfig).validate_json(text)

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
        if str not in typing.get_args(ann):
            kwargs = self.arg_helpers().literal_to_kwargs({ann})
            if "choices" not in kwargs:
                raise HarnessError(f"{self.dist.label}: --kv-cache-dtype has no choices ({kwargs})")
            return list(kwargs["choices"])
        # vLLM 0.33.0 on: the field also takes str, so argparse takes any string, and
        # CacheConfig._validate_cache_dtype refuses a name outside the CacheDType literal when the
        # engine config is built (platform plugins may register more; none of the engines here do).
        cache = next(n for n in self.dist.tree(self.CACHE).body if isinstance(n, ast.ClassDef) and n.name == "CacheConfig")
        if not any(isinstance(f, ast.FunctionDef) and f.name == "_validate_cache_dtype" for f in cache.body):
            raise HarnessError(f"{self.dist.label}: --kv-cache-dtype takes any string and CacheConfig has no _validate_cache_dtype")
        self.dtypes_checked = "config"
        return sorted(self.dist.literal_strings(self.CACHE, "CacheDType"))

    def torch_dtype_keys(self):
        return self.dist.dict_keys(self.TORCH_UTILS, "STR_DTYPE_TO_TORCH_DTYPE")

    def store_config_module(self):
        return self.dist.load(
            self.reader,
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
    vllm = VLLM(dists["vllm"], dists["reader"])
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
            errors.append(Rejected(f"{label} MooncakeStoreConfig.load_from_config ({vllm.reader})", e))
    checks = {
        "kv_transfer_config": lambda: check_kv_transfer(vllm, label, argv, vllm.connectors(), "MooncakeStoreConnector"),
        "kv_cache_dtype": lambda: check_dtype(label, argv, vllm.dtype_choices(), f"CacheDType in {VLLM.CACHE}"
                                              + (", checked by CacheConfig._validate_cache_dtype" if vllm.dtypes_checked == "config" else "")),
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
    # Where the plugin registers its connectors: kv_transfer/__init__.py from 0.18.0 on,
    # distributed/__init__.py before; found by content (see connectors).
    REGISTER_UNDER = "vllm_ascend/distributed"
    WORKER = "vllm_ascend/worker/worker.py"

    def __init__(self, dist, reader=MOONCAKE):
        self.dist = dist
        self.reader = reader

    def backend_module(self):
        # The Backend base class sits beside the Mooncake backend in every release.
        base = self.dist.load(os.path.join(os.path.dirname(self.reader), "backend.py"), ["Backend"])
        return self.dist.load(
            self.reader,
            ["MooncakeBackend", "MooncakeStoreConfig"],
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
        found = []
        for root, _, files in os.walk(self.dist.path(self.REGISTER_UNDER)):
            for f in files:
                if f == "__init__.py":
                    with open(os.path.join(root, f), encoding="utf-8", errors="replace") as fh:
                        if re.search(r"register_connector\(\s*[\"']AscendStoreConnector[\"']", fh.read()):
                            found.append(os.path.relpath(os.path.join(root, f), self.dist.root))
        if len(found) != 1:
            raise HarnessError(f"{self.dist.label}: want one __init__.py under {self.REGISTER_UNDER} registering "
                               f"AscendStoreConnector, found {found or 'none'}")
        return self.dist.register_connector_calls(found[0])

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
    ascend = Ascend(dists["vllm-ascend"], dists["reader"])
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
            errors.append(Rejected(f"{label} MooncakeBackend ({ascend.reader})", e))
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

    def __init__(self, dist, reader=STORE):
        self.dist = dist
        dist.deep_imports = True
        self.reader = reader
        self._server_args = None

    def environ(self):
        # Loaded whole: it imports only the standard library, and reads os.environ lazily.
        return self.dist.load(self.ENVIRON)

    def store_module(self, envs):
        return self.dist.load(
            self.reader,
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
            arg_utils = (self.dist.is_light(self.ARG_UTILS) and self.dist.light_module(self.ARG_UTILS)) or self.dist.load(self.ARG_UTILS)
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
    sg = SGLang(dists["sglang"], dists["reader"])
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
            errors.append(Rejected(f"{label} MooncakeBaseStore._load_config ({sg.reader})", e))
    if parsed is not None and parsed.hicache_storage_backend != "mooncake":
        errors.append(Rejected(f"{label} --hicache-storage-backend", ValueError(
            f"the storage backend is {parsed.hicache_storage_backend!r}, not 'mooncake': the MOONCAKE_* variables are never read")))
    return out, errors


# ---------------------------------------------------------------------------------------------


RUNNERS = {"vllm": run_vllm, "vllm-ascend": run_ascend, "sglang": run_sglang}


def load_dists(readers, release, reader, base, facts_only=False):
    """The distributions one release's checks read, from the manifest hack/readers.sh wrote:
    the release, and on vLLM-Ascend the vLLM it runs in (base). reader is the table's file of the
    release's Mooncake reader. For --facts of a release the table does not hold yet, reader may
    be None (then it is found by content) and base too (then only vLLM-Ascend's own facts are
    measured, among them the vLLM its image is built from)."""
    try:
        with open(os.path.join(readers, "manifest.json")) as f:
            roots = json.load(f)["dists"]
    except (OSError, KeyError) as e:
        raise HarnessError(f"{readers}: no manifest.json listing dists ({e}): run hack/readers.sh")
    engine, _, version = release.partition("==")
    if engine not in RUNNERS or not version:
        raise HarnessError(f"--release {release!r}: want ENGINE==VERSION with ENGINE one of {sorted(RUNNERS)}")

    def dist(key):
        if key not in roots:
            raise HarnessError(f"{readers}: {key} was not fetched (hack/readers.sh fetches every release of engines/releases.json; rerun it)")
        d = Dist(key.replace("==", "-"), os.path.join(readers, roots[key]))
        d.version = key.partition("==")[2]
        return d

    dists = {"engine": engine, "reader": reader, engine: dist(release)}
    if engine == "vllm-ascend" and base:
        dists["vllm-ascend-vllm"] = dist(f"vllm=={base}")
    elif engine == "vllm-ascend" and not facts_only:
        raise HarnessError("--base: name the vLLM release vLLM-Ascend runs in")
    if not reader and not facts_only:
        raise HarnessError("--reader: name the file of the release's Mooncake reader (engines/releases.json's reader)")
    return dists


class DistImporter:
    """Serves the imports extracted code makes while it runs (function-local ones, such as
    SGLang 0.5.21's parser-name registries, imported when the parser is built): a light module
    of the distribution (see Dist.is_light) runs whole, any other is a module of stand-ins."""

    def __init__(self, dist, top):
        self.dist, self.top = dist, top

    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] != self.top:
            return None
        return importlib.util.spec_from_loader(fullname, self, is_package=True)

    def create_module(self, spec):
        rel = self.dist.module_rel(spec.name)
        if rel is not None and self.dist.is_light(rel) and self.dist.light_module(rel) is not None:
            return self.dist.light_module(rel)
        m = types.ModuleType(spec.name)
        m.__getattr__ = lambda n, _p=spec.name: StandIn(f"{_p}.{n}")
        return m

    def exec_module(self, module):
        pass


def serve_imports(dists):
    """Lets the engine's own package be imported while its checks run (see DistImporter)."""
    engine = dists["engine"]
    top = {"vllm": "vllm", "sglang": "sglang", "vllm-ascend": "vllm_ascend"}[engine]
    sys.meta_path.insert(0, DistImporter(dists[engine], top))


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


def located(dist, under, must):
    """The file of dist under `under` that defines class MooncakeStoreConfig and mentions `must`
    (the shortest path when several do): where the release's reader lives, found by content."""
    found = []
    for root, _, files in os.walk(dist.path(under)):
        for f in files:
            if f.endswith(".py"):
                p = os.path.join(root, f)
                with open(p, encoding="utf-8", errors="replace") as fh:
                    src = fh.read()
                if re.search(r"^class MooncakeStoreConfig\b", src, re.M) and must in src:
                    found.append(os.path.relpath(p, dist.root))
    if not found:
        raise HarnessError(f"{dist.label}: no file under {under} defines MooncakeStoreConfig reading {must}")
    return sorted(found, key=lambda r: (len(r), r))[0]


def _option_strings(call):
    return [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("-")]


def vllm_flags(dist):
    """`vllm serve`'s option strings as groups of spellings, read statically: make_arg_parser's own
    add_argument calls, and the add_cli_args of the classes it registers (their literal option
    strings, or, for a class that spells none, its dataclass fields as --field-name)."""
    serve = "vllm/entrypoints/cli/serve.py"
    module = next((n.module for n in ast.walk(dist.tree(serve)) if isinstance(n, ast.ImportFrom)
                   and any(a.name == "make_arg_parser" for a in n.names)), None)
    if module is None:
        raise HarnessError(f"{dist.label}: {serve} imports no make_arg_parser")
    cli = module.replace(".", "/") + ".py"
    fn = next((n for n in dist.tree(cli).body if isinstance(n, ast.FunctionDef) and n.name == "make_arg_parser"), None)
    if fn is None:
        raise HarnessError(f"{dist.label}: {cli} defines no make_arg_parser")
    groups = []

    def calls(node):
        return [n for n in ast.walk(node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "add_argument"]

    groups += [_option_strings(c) for c in calls(fn)]
    registered = {n.func.value.id for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                  and n.func.attr == "add_cli_args" and isinstance(n.func.value, ast.Name)}
    imports = {a.asname or a.name: n.module for n in ast.walk(dist.tree(cli)) if isinstance(n, ast.ImportFrom) and n.module for a in n.names}
    for name in sorted(registered):
        rel = (imports.get(name) or module).replace(".", "/") + ".py"
        tree = dist.tree(rel)
        classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
        chain, cls = [], classes.get(name)
        while cls is not None:
            chain.append(cls)
            cls = classes.get(next((b.id for b in cls.bases if isinstance(b, ast.Name)), None))
        if not chain:
            raise HarnessError(f"{dist.label}: {rel} defines no {name} (registered by make_arg_parser)")
        explicit = [_option_strings(c) for k in chain for item in k.body
                    if isinstance(item, ast.FunctionDef) and item.name == "add_cli_args" for c in calls(item)]
        if any(explicit):
            groups += explicit
            continue
        for k in chain:
            for item in k.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and not item.target.id.startswith("_"):
                    groups.append(["--" + item.target.id.replace("_", "-")])
    return [g for g in groups if g]


def flag_facts(groups, flags):
    """For each flag asked about that the release has: its other spellings."""
    out = {}
    for f in flags:
        for g in groups:
            if f in g:
                out[f] = sorted(o for o in g if o != f and o.startswith("--"))
    return out


def ascend_dockerfile(dist):
    """The vLLM release (VLLM_TAG) and Mooncake client (MOONCAKE_TAG) vLLM-Ascend's Dockerfile
    builds its image from."""
    out = {}
    p = dist.path("Dockerfile")
    if not os.path.exists(p):
        raise HarnessError(f"{dist.label}: no Dockerfile (rerun hack/readers.sh, which keeps it)")
    dist.used.add("Dockerfile")
    with open(p, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            for key, rx in (("base", r"^ARG VLLM_TAG=\"?v?([^\"\s]+)"), ("client", r"^ARG MOONCAKE_TAG=\"?v?([^\"\s]+)")):
                m = re.match(rx, line.strip())
                if m and key not in out:
                    out[key] = {"version": m.group(1), "source": f"Dockerfile:{i} {line.strip()}"}
    return out


def facts(dists, flags):
    """What the table says of a release, measured from its code: where its reader lives, its
    --kv-cache-dtype spellings and where they are checked, the flags asked about with their other
    spellings, and on vLLM-Ascend the vLLM and Mooncake client its image is built from. Every
    loader the checks use runs too, so the files they read are recorded."""
    engine = dists["engine"]
    d = dists[engine]
    out = {}
    if engine == "vllm":
        out["reader"] = located(d, "vllm", "MOONCAKE_CONFIG_PATH")
        vllm = VLLM(d, dists["reader"] or out["reader"])
        out["dtypes"] = vllm.dtype_choices()
        out["dtypesChecked"] = vllm.dtypes_checked
        out["flags"] = flag_facts(vllm_flags(d), flags)
        _dataclass_fields(vllm.store_config_module().MooncakeStoreConfig)
        vllm.kv_roles(), vllm.connectors(), vllm.arg_helpers()
    elif engine == "sglang":
        out["reader"] = located(d, "sglang", "MOONCAKE_MASTER")
        sg = SGLang(d, dists["reader"] or out["reader"])
        parser = sg.parser()
        out["dtypes"] = list(parser._option_string_actions["--kv-cache-dtype"].choices)
        out["dtypesChecked"] = "argparse"
        out["flags"] = flag_facts([a.option_strings for a in parser._actions], flags)
        sg.store_module(sg.environ().envs)
    if engine in ("vllm", "sglang"):
        client = wheel_client(d)
        if client is not None:
            out["client"] = client
    else:
        out["reader"] = located(d, "vllm_ascend", "MOONCAKE_CONFIG_PATH")
        ascend = Ascend(d, dists["reader"] or out["reader"])
        docker = ascend_dockerfile(d)
        out["base"] = docker.get("base", {}).get("version")
        out["client"] = docker.get("client")
        ascend.backend_module(), ascend.connectors()
        if "vllm-ascend-vllm" not in dists:
            return out
        vllm = VLLM(dists["vllm-ascend-vllm"])
        choices, _ = ascend_dtype_choices(vllm, ascend)
        out["dtypes"] = choices
        out["dtypesChecked"] = vllm.dtype_choices() and vllm.dtypes_checked
        out["flags"] = flag_facts(vllm_flags(vllm.dist), flags)
        vllm.kv_roles(), vllm.connectors(), vllm.arg_helpers()
    return out


def wheel_client(dist):
    """The Mooncake client a wheel's METADATA requires ({"version", "source"}), or, when it
    requires none, a source saying so; None when the METADATA was not unpacked."""
    for entry in sorted(os.listdir(dist.root)):
        if entry.endswith(".dist-info") and os.path.exists(os.path.join(dist.root, entry, "METADATA")):
            rel = f"{entry}/METADATA"
            dist.used.add(rel)
            with open(dist.path(rel), encoding="utf-8", errors="replace") as f:
                reqs = [line.split(":", 1)[1].strip() for line in f
                        if line.startswith("Requires-Dist:") and "mooncake" in line.lower()]
            if not reqs:
                return {"source": f"{rel} declares no Mooncake requirement"}
            pinned = re.search(r"==\s*([\w.]+)", reqs[0])
            return {"version": pinned.group(1) if pinned else None, "source": f"{rel}: Requires-Dist: {'; '.join(reqs)}"}
    return None


def prune(dist):
    """Deletes every file of dist no check read."""
    removed = 0
    for root, _, files in os.walk(dist.root):
        for f in files:
            rel = os.path.relpath(os.path.join(root, f), dist.root)
            if rel not in dist.used:
                os.remove(os.path.join(root, f))
                removed += 1
    return removed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--readers", required=True, help="the directory hack/readers.sh prints")
    ap.add_argument("--release", required=True, help="ENGINE==VERSION, a release of engines/releases.json")
    ap.add_argument("--reader", help="the file of the release's Mooncake reader (the table's); with --facts, found by content when left out")
    ap.add_argument("--base", help="on vLLM-Ascend: the vLLM release it runs in (the table's)")
    ap.add_argument("--facts", action="store_true", help="print what the table should say of the release")
    ap.add_argument("--flags", default="", help="with --facts: the flags to report, comma-separated")
    ap.add_argument("--prune", action="store_true", help="with --facts: delete the files no check read")
    ap.add_argument("cases", nargs="?", help="CASES.json (a list of cases), or - for stdin")
    a = ap.parse_args()
    try:
        dists = load_dists(a.readers, a.release, a.reader, a.base, facts_only=a.facts)
        serve_imports(dists)
        if a.facts:
            out = facts(dists, [f for f in a.flags.split(",") if f])
            if a.prune:
                for k in (dists["engine"], "vllm-ascend-vllm"):
                    if k in dists:
                        prune(dists[k])
            json.dump(out, sys.stdout, indent=2, default=str)
            print()
            return 0
        if not a.cases:
            ap.error("give CASES.json (or - for stdin), or --facts")
        src = sys.stdin if a.cases == "-" else open(a.cases, encoding="utf-8")
        cases = json.load(src)
        verdicts = []
        for case in cases:
            name = case.get("name") or "<unnamed case>"
            if case.get("engine") != dists["engine"]:
                raise HarnessError(f"{name}: engine {case.get('engine')!r}, and --release is {a.release}")
            out, errors = RUNNERS[dists["engine"]](case, dists)
            verdicts.append({"name": name, "accepted": not errors, "errors": [f"{name}: {e}" for e in errors], "read": out})
    except HarnessError as e:
        print(f"harness: {e}", file=sys.stderr)
        return 2
    json.dump(verdicts, sys.stdout, default=str)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
