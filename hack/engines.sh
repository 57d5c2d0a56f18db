#!/usr/bin/env bash
# Keeps the support table (engines/releases.json) up with PyPI: lists the releases of vLLM,
# SGLang and vLLM-Ascend newer than the table's newest row of each, fetches them (and the vLLM
# each vLLM-Ascend release is built on) the way hack/readers.sh does, measures each with
# test/readers/harness.py --facts, and prints what changed against the table's newest row of its
# engine (where the Mooncake reader lives, the --kv-cache-dtype spellings and where they are
# checked, the flags injection writes and refuses with their other spellings, the bundled
# Mooncake client, vLLM-Ascend's vLLM) and the row to add, so that adding a release is one
# reviewed diff to the table (then `make generate`, and test/readers runs the goldens under it).
#
# Usage:
#   hack/engines.sh [--table FILE]   FILE defaults to engines/releases.json
#
# Prints "nothing newer" and exits 0 when PyPI has no release past the table. Progress goes to
# stderr; the fetched sources are deleted on exit.
set -euo pipefail
shopt -s inherit_errexit

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TABLE=$REPO/engines/releases.json
HARNESS=$REPO/test/readers/harness.py
TOOLS_DIR=${KVCACHE_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kvcache-tools}

log() { echo "engines: $*" >&2; }
die() { log "$*"; exit 1; }

while [ $# -gt 0 ]; do
  case $1 in
    --table) TABLE=$(realpath "${2:?--table needs a file}"); shift 2 ;;
    -h|--help|help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "usage: $0 [--table FILE]" ;;
  esac
done
[ -f "$TABLE" ] || die "no support table at $TABLE"

# The readers' venv (pydantic, msgspec, ...) runs the harness; building it is hack/readers.sh's.
eval "$("$REPO/hack/readers.sh" env)"
PY=$KVCACHE_READERS_PYTHON

# newer prints ENGINE==VERSION for each final release on PyPI (not yanked, with files) newer
# than the table's newest of that engine, oldest first.
newer() {
  "$PY" - "$TABLE" <<'EOF'
import json, re, sys, urllib.request
t = json.load(open(sys.argv[1]))

def key(v):
    m = re.fullmatch(r"(\d+(?:\.\d+)*)(?:\.post(\d+))?", v)
    if not m:
        return None  # a pre-, dev or local release: not one users are told to run
    nums = [int(x) for x in m.group(1).split(".")]
    return tuple(nums + [0] * (4 - len(nums))) + (int(m.group(2) or -1),)

for e in t["engines"]:
    have = [r["version"] for r in t["releases"] if r["engine"] == e["id"]]
    newest = max(have, key=key) if have else "0"
    url = f'https://pypi.org/pypi/{e["pypi"]}/json'
    try:
        with urllib.request.urlopen(url, timeout=60) as resp:
            info = json.load(resp)
    except OSError as err:
        sys.exit(f"{url}: {err}")
    found = sorted((v for v, files in info["releases"].items()
                    if key(v) is not None and key(v) > key(newest)
                    and files and not all(f.get("yanked") for f in files)), key=key)
    print(f'{e["id"]}: newest in the table {newest}, on PyPI {info["info"]["version"]}; newer: {", ".join(found) or "none"}', file=sys.stderr)
    for v in found:
        print(f'{e["id"]}=={v}')
EOF
}

# flags_of ENGINE: the flags the table's newest row of ENGINE judges, comma-separated (the ones
# injection writes or refuses).
flags_of() {
  "$PY" -c '
import json, sys
t = json.load(open(sys.argv[1]))
rows = [r for r in t["releases"] if r["engine"] == sys.argv[2]]
print(",".join(rows[-1]["flags"]) if rows else "")
' "$TABLE" "$1"
}

# facts DIR KEY [BASE]: harness.py --facts of the release KEY fetched into DIR.
facts() {
  local args=(--readers "$1" --release "$2" --facts --flags="$(flags_of "${2%%==*}")")
  [ -n "${3:-}" ] && args+=(--base "$3")
  "$PY" "$HARNESS" "${args[@]}"
}

listed=$(newer)
keys=()
[ -z "$listed" ] || mapfile -t keys <<<"$listed"
if [ ${#keys[@]} -eq 0 ]; then
  echo "nothing newer on PyPI than $(realpath --relative-to="$REPO" "$TABLE")"
  exit 0
fi

mkdir -p "$TOOLS_DIR"
work=$(mktemp -d "$TOOLS_DIR/.engines.XXXXXXXX")
# shellcheck disable=SC2064 # expand $work now
trap "rm -rf '$work'" EXIT
"$REPO/hack/readers.sh" fetch "$work" "${keys[@]}"

measured=$work/facts.jsonl
for key in "${keys[@]}"; do
  if [ "${key%%==*}" = vllm-ascend ]; then
    # Its checks run in the vLLM its image is built from, which its own facts name.
    base=$(facts "$work" "$key" | "$PY" -c 'import json, sys; print(json.load(sys.stdin)["base"] or "")')
    [ -n "$base" ] || die "$key: its Dockerfile names no VLLM_TAG, so the vLLM it runs in is unknown"
    if [ ! -d "$work/vllm-$base" ]; then
      "$REPO/hack/readers.sh" fetch "$work" "vllm==$base"
    fi
    out=$(facts "$work" "$key" "$base")
  else
    out=$(facts "$work" "$key")
  fi
  "$PY" -c 'import json, sys; print(json.dumps({"key": sys.argv[1], "facts": json.loads(sys.argv[2])}))' "$key" "$out" >>"$measured"
done

# The report: each release against the table's newest row of its engine, and the row to add.
"$PY" - "$TABLE" "$measured" <<'EOF'
import json, sys
t = json.load(open(sys.argv[1]))
for line in open(sys.argv[2]):
    m = json.loads(line)
    engine, _, version = m["key"].partition("==")
    f = m["facts"]
    prev = [r for r in t["releases"] if r["engine"] == engine][-1]
    print(f"{engine} {version}, against {prev['version']} (the table's newest {engine}):")
    changed = []
    if f["reader"] != prev["reader"]:
        changed.append(f"  reader moved: {prev['reader']} -> {f['reader']}")
    added = [d for d in f["dtypes"] if d not in prev["dtypes"]]
    dropped = [d for d in prev["dtypes"] if d not in f["dtypes"]]
    if added or dropped:
        changed.append(f"  --kv-cache-dtype choices: added {', '.join(added) or 'none'}; dropped {', '.join(dropped) or 'none'}")
    elif f["dtypes"] != prev["dtypes"]:
        changed.append("  --kv-cache-dtype choices: the same, in another order")
    if f["dtypesChecked"] != prev["dtypesChecked"]:
        changed.append(f"  --kv-cache-dtype checked by: {prev['dtypesChecked']} -> {f['dtypesChecked']}")
    for flag, aliases in prev["flags"].items():
        if flag not in f["flags"]:
            changed.append(f"  {flag}: gone from its parser (injection writes or refuses it)")
        elif sorted(f["flags"][flag]) != sorted(aliases):
            changed.append(f"  {flag}: other spellings {', '.join(aliases) or 'none'} -> {', '.join(f['flags'][flag]) or 'none'}")
    client = f.get("client") or {}
    if client.get("version") != prev.get("client", {}).get("version"):
        changed.append(f"  bundled Mooncake client: {prev.get('client', {}).get('version') or 'unknown'} -> "
                       f"{client.get('version') or 'unknown'} ({client.get('source') or 'no source read'})")
    if engine == "vllm-ascend" and f.get("base") != prev.get("base"):
        changed.append(f"  built on vLLM {prev.get('base')} -> {f.get('base')}")
    print("\n".join(changed) if changed else "  nothing the table records changed")
    row = {"engine": engine, "version": version,
           "supported": bool(prev["supported"]) and all(k in f["flags"] for k in prev["flags"]),
           "reader": f["reader"], "dtypes": f["dtypes"], "dtypesChecked": f["dtypesChecked"]}
    if engine == "vllm-ascend":
        row["base"] = f["base"]
    row["flags"] = f["flags"]
    if client and not client.get("version"):
        client = {"source": "unknown: " + client["source"]}
    row["client"] = client or {"source": "unknown: nothing in the release names it"}
    if not row["supported"]:
        row["unsupported"] = "REVIEW: say why injection does not support it"
    print("  the row to add to engines/releases.json (review `supported`, then `make generate`):")
    print("    " + json.dumps(row).replace("\n", "\n    "))
EOF
