# Shell functions the hack/ scripts share: installing Debian packages and picking a Python.
# Sourced, not run; the caller defines log and die (each script names itself in its messages).
# shellcheck shell=bash

# as_root CMD...: run CMD as root, through sudo when this user is not root.
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else die "need root to run: $* (install those packages, or install sudo)"
  fi
}

# missing_debs PKG...: print the packages that are not installed. dpkg-query answers in ~10 ms,
# cheap enough for every run. Off Debian nothing is reported, and what needs the packages says
# what is really missing.
missing_debs() {
  command -v dpkg-query >/dev/null 2>&1 || return 0
  local installed p
  installed=$(dpkg-query -W -f='${Package} ${Status}\n' "$@" 2>/dev/null | awk '/ ok installed$/ {print $1}' || true)
  for p in "$@"; do
    grep -qx "$p" <<<"$installed" || echo "$p"
  done
}

# ensure_debs PKG...: install with apt whichever of the packages is missing. A brand-new machine
# has no package lists yet, so the lists are updated first, only on this path.
ensure_debs() {
  local missing
  mapfile -t missing < <(missing_debs "$@")
  [ ${#missing[@]} -eq 0 ] && return 0
  command -v apt-get >/dev/null 2>&1 || die "missing Debian packages (${missing[*]}) and no apt-get to install them"
  log "installing Debian packages: ${missing[*]}"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
}

# pick_python VAR WHAT: print a Python >= 3.10 whose venv module can bootstrap pip: $VAR when the
# user sets it (e.g. MOONCAKE_PYTHON), else python3, installed when missing. WHAT names what
# needs it, for messages. Debian's own python3 lacks ensurepip until python3-venv is installed.
pick_python() {
  local var=$1 what=$2
  local py=${!var:-python3}
  if ! command -v "$py" >/dev/null 2>&1; then
    [ -z "${!var:-}" ] || die "$var=$py not found"
    ensure_debs python3 python3-venv
  fi
  "$py" -c 'import sys; sys.exit(sys.version_info < (3, 10))' ||
    die "$py is $("$py" -V 2>&1); $what needs Python >= 3.10 (set $var)"
  if ! "$py" -c 'import ensurepip, venv' >/dev/null 2>&1; then
    [ "$(command -v "$py")" = /usr/bin/python3 ] || die "$py has no ensurepip/venv module"
    ensure_debs python3-venv
  fi
  command -v "$py"
}
