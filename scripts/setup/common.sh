# shellcheck shell=bash
# scripts/setup/common.sh -- what every dependency script of scripts/setup.sh shares (sourced by
# setup.sh, not a command): logging, the cache's layout, root and the system's apt (missing build
# tools), the private apt the .deb dependencies come from, stamps, .deb unpacking, Python venvs
# and finding nvcc.
#
# The build tools setup.sh needs are installed with apt-get when missing: g++, gfortran (the
# Fortran module, fortran/, on where a Fortran compiler is found), pkg-config (the Makefile
# consumer of tests/package), cmake, make and the tools the cache is made with.
#
# The .deb dependencies (dlpack.sh, catch2.sh) and Kokkos' source (kokkos.sh) are fetched with a
# PRIVATE apt configuration (its own sources list, lists and cache under the cache folder); the
# system's apt sources are never modified. The archive URI is taken at run time from this
# machine's own apt configuration (KSTAGE_APT_URI overrides it). Packages are unpacked with
# dpkg-deb -x into the cache, never installed into the system.
#
# The venvs (perf.sh, jax.sh, python.sh, adios2.sh) are made with `python3 -m venv`, with
# packages from the machine's configured pip index (Debian's python3-venv is installed with
# apt-get when the venv module is missing). setup.sh makes them in the background, side by side
# with the Kokkos and ADIOS2 builds: they mostly wait for downloads.

log() { printf '[kstage-setup] %s\n' "$*" >&2; }
die() { printf '[kstage-setup] ERROR: %s\n' "$*" >&2; exit 1; }

if [ -z "${HOME:-}" ]; then
  HOME=$(getent passwd "$(id -u)" | cut -d: -f6)
  export HOME
fi

# The cache's layout (docs/building.md, "Dependencies"). Each dependency script adds its prefix.
DEPS_DIR=${KSTAGE_DEPS_DIR:-$HOME/.cache/kstage-deps}
case $DEPS_DIR in /*) ;; *) DEPS_DIR=$PWD/$DEPS_DIR ;; esac
APT_DIR=$DEPS_DIR/apt
DL_DIR=$DEPS_DIR/downloads
USR_PREFIX=$DEPS_DIR/usr-prefix
STAMP_DIR=$DEPS_DIR/stamps
WORK_DIR=$DEPS_DIR/work
LOG_DIR=$DEPS_DIR/logs

# Pinned inputs. Bumping a dependency's recipe number (in its script) forces a rebuild/re-extract
# of that dependency.
DEBIAN_SUITE=bookworm
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg

JOBS=${KSTAGE_JOBS:-$(nproc 2>/dev/null || echo 2)}

# --------------------------------------------------------------------------------------------
# Build tools (installed with the system's apt only when missing)
# --------------------------------------------------------------------------------------------
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else die "need root (or sudo) to run: $*"
  fi
}

# system_apt_install PACKAGE...: apt-get update, then install PACKAGEs into the system (the
# machine's own apt configuration; only for what is missing).
system_apt_install() {
  as_root env DEBIAN_FRONTEND=noninteractive apt-get -q update
  as_root env DEBIAN_FRONTEND=noninteractive apt-get -q install -y --no-install-recommends "$@"
}

ensure_tools() {
  local missing=() pair cmd pkg
  for pair in g++:g++ gfortran:gfortran pkg-config:pkg-config cmake:cmake make:make \
              dpkg-source:dpkg-dev xz:xz-utils python3:python3 tar:tar gzip:gzip flock:util-linux; do
    cmd=${pair%%:*}; pkg=${pair#*:}
    command -v "$cmd" >/dev/null 2>&1 || missing+=("$pkg")
  done
  [ -e /etc/ssl/certs/ca-certificates.crt ] || missing+=(ca-certificates)
  [ -e "$KEYRING" ] || missing+=(debian-archive-keyring)
  command -v apt-get >/dev/null 2>&1 || die "apt-get not found: this script supports Debian 12"
  if [ "${#missing[@]}" -gt 0 ]; then
    log "installing missing build tools: ${missing[*]}"
    system_apt_install "${missing[@]}"
  fi
  local v
  v=$(cmake --version | awk 'NR==1{print $3}')
  if ! printf '3.25\n%s\n' "$v" | sort -V -C; then
    die "CMake >= 3.25 is required (found $v)"
  fi
}

# --------------------------------------------------------------------------------------------
# Archive URI from the machine's own apt configuration
# --------------------------------------------------------------------------------------------
# Prints the first URI whose suite list contains exactly "$DEBIAN_SUITE" (so -updates,
# -security, -backports entries are skipped). Handles deb822 *.sources and one-line *.list.
find_archive_uri() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -r "$f" ] || continue
    awk -v suite="$DEBIAN_SUITE" '
      function flush() {
        if (enabled && is_deb && uri != "" && has_suite) { print uri; found = 1; exit }
        uri = ""; has_suite = 0; is_deb = 0; enabled = 1
      }
      BEGIN { enabled = 1 }
      /^[ \t]*#/ { next }
      /^[ \t]*$/ { flush(); next }
      {
        key = tolower($1); sub(/:$/, "", key)
        if (key == "types")   { for (i = 2; i <= NF; i++) if ($i == "deb" || $i == "deb-src") is_deb = 1 }
        if (key == "uris")    { uri = $2 }
        if (key == "suites")  { for (i = 2; i <= NF; i++) if ($i == suite) has_suite = 1 }
        if (key == "enabled") { if (tolower($2) == "no") enabled = 0 }
      }
      END { if (!found) flush() }
    ' "$f"
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -r "$f" ] || continue
    sed -e 's/\[[^]]*\]//' "$f" | awk -v suite="$DEBIAN_SUITE" '
      $1 == "deb" || $1 == "deb-src" { if ($3 == suite) { print $2; exit } }'
  done
}

# --------------------------------------------------------------------------------------------
# Private apt
# --------------------------------------------------------------------------------------------
APT_OPTS=()
APT_READY=0
apt_private_init() {
  [ "$APT_READY" -eq 1 ] && return 0
  local uri=${KSTAGE_APT_URI:-}
  if [ -z "$uri" ]; then
    uri=$(find_archive_uri | grep -v '^cdrom:' | head -n1 || true)
  fi
  [ -n "$uri" ] || die "no '$DEBIAN_SUITE' entry found in /etc/apt/sources.list or /etc/apt/sources.list.d/ (set KSTAGE_APT_URI to a Debian archive URI)"
  uri=${uri%/}
  log "Debian archive (from this machine's apt configuration): $uri"
  mkdir -p "$APT_DIR"/state/lists/partial "$APT_DIR"/cache/archives/partial "$APT_DIR"/etc
  cat > "$APT_DIR/etc/sources.list" <<SOURCES
# Generated by kstage scripts/setup.sh -- private to the kstage dependency cache.
deb-src [signed-by=$KEYRING] $uri $DEBIAN_SUITE main
deb [signed-by=$KEYRING] $uri $DEBIAN_SUITE-backports main
deb [signed-by=$KEYRING] $uri trixie main
SOURCES
  APT_OPTS=(
    -o "Dir::Etc::SourceList=$APT_DIR/etc/sources.list"
    -o "Dir::Etc::SourceParts=/dev/null"
    -o "Dir::State=$APT_DIR/state"
    -o "Dir::Cache=$APT_DIR/cache"
    -o "Dir::Etc::Preferences=/dev/null"
    -o "Dir::Etc::PreferencesParts=/dev/null"
    -o "APT::Sandbox::User=root"
    -o "Acquire::Languages=none"
  )
  log "apt-get update (private lists under $APT_DIR)"
  apt-get -q "${APT_OPTS[@]}" update >"$LOG_DIR/apt-update.log" 2>&1 \
    || { tail -n 30 "$LOG_DIR/apt-update.log" >&2; die "private apt-get update failed"; }
  APT_READY=1
}

apt_private_cleanup() {
  # The lists are only needed while downloading; drop them to keep the cache small.
  [ "$APT_READY" -eq 1 ] || return 0
  rm -rf "$APT_DIR/state/lists" "$APT_DIR/cache"
}

# --------------------------------------------------------------------------------------------
# Stamps
# --------------------------------------------------------------------------------------------
# A stamp's first line is the "key" (recipe + inputs); later lines are informational.
stamp_ok() { # name key [file-that-must-exist...]
  local name=$1 key=$2 f; shift 2
  [ -f "$STAMP_DIR/$name.stamp" ] || return 1
  [ "$(head -n1 "$STAMP_DIR/$name.stamp")" = "$key" ] || return 1
  for f in "$@"; do [ -e "$f" ] || return 1; done
  return 0
}

# --------------------------------------------------------------------------------------------
# .deb packages unpacked into $USR_PREFIX (dlpack.sh, catch2.sh)
# --------------------------------------------------------------------------------------------
deb_dep() { # name apt-spec recipe check-file
  local name=$1 spec=$2 recipe=$3 check=$4
  local key="$name spec=$spec recipe=$recipe"
  if stamp_ok "$name" "$key" "$check"; then
    log "$name: cached ($(sed -n 2p "$STAMP_DIR/$name.stamp"))"
    return 0
  fi
  apt_private_init
  local pkg=${spec%%/*} dir="$DL_DIR/$name"
  rm -rf "$dir"; mkdir -p "$dir"
  log "$name: downloading $spec"
  (cd "$dir" && apt-get -q "${APT_OPTS[@]}" download "$spec") >"$LOG_DIR/$name-download.log" 2>&1 \
    || { tail -n 30 "$LOG_DIR/$name-download.log" >&2; die "$name: apt-get download $spec failed"; }
  local debs deb
  debs=("$dir"/"${pkg}"_*.deb)
  deb=${debs[0]}
  [ -f "$deb" ] || die "$name: no .deb downloaded for $spec"
  # Remove the files of a previously unpacked version of this package.
  if [ -f "$STAMP_DIR/$name.files" ]; then
    (cd "$USR_PREFIX" && while IFS= read -r p; do
       [ -f "$p" ] || [ -L "$p" ] && rm -f -- "$p"
     done < "$STAMP_DIR/$name.files") || true
  fi
  mkdir -p "$USR_PREFIX"
  dpkg-deb -x "$deb" "$USR_PREFIX"
  dpkg-deb --fsys-tarfile "$deb" | tar -t | sed -e 's|^\./||' -e '/\/$/d' > "$STAMP_DIR/$name.files"
  [ -e "$check" ] || die "$name: $check missing after unpacking $(basename "$deb")"
  printf '%s\n%s %s\n' "$key" "$(dpkg-deb -f "$deb" Package)" "$(dpkg-deb -f "$deb" Version)" \
    > "$STAMP_DIR/$name.stamp"
  log "$name: unpacked $(basename "$deb")"
  rm -rf "$dir"
}

# --------------------------------------------------------------------------------------------
# Python venvs (perf.sh, jax.sh, python.sh, adios2.sh)
# --------------------------------------------------------------------------------------------
# ensure_venv_module NAME: python3's venv module (Debian's python3-venv, installed with apt-get
# when missing; NAME names the log). setup.sh calls it once before it makes venvs side by side.
ensure_venv_module() {
  local name=$1
  python3 -c 'import venv, ensurepip' >/dev/null 2>&1 && return 0
  [ "$(id -u)" -eq 0 ] || die "$name: python3's venv module is missing; install python3-venv (as root: apt-get install python3-venv)"
  log "$name: installing python3-venv (Debian)"
  env DEBIAN_FRONTEND=noninteractive apt-get -q update >"$LOG_DIR/$name-apt.log" 2>&1 || true
  env DEBIAN_FRONTEND=noninteractive apt-get -q install -y --no-install-recommends python3-venv \
    >>"$LOG_DIR/$name-apt.log" 2>&1 \
    || { tail -n 20 "$LOG_DIR/$name-apt.log" >&2; die "$name: apt-get install python3-venv failed"; }
}

# python_venv NAME DIR RECIPE CHECK PACKAGE...: a venv in DIR with PACKAGEs from the machine's
# own pip configuration (no index is named here); CHECK is Python that imports them and prints
# their versions. Cached by a stamp named NAME.
python_venv() {
  local name=$1 venv=$2 recipe=$3 check=$4
  shift 4
  local py=python3 pyver key have start=$SECONDS
  pyver=$("$py" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])') \
    || die "$name: python3 does not run"
  key="$name python=$pyver recipe=$recipe packages=$*"
  if stamp_ok "$name" "$key" "$venv/bin/python"; then
    log "$name: cached ($(sed -n 2p "$STAMP_DIR/$name.stamp"))"
    return 0
  fi
  ensure_venv_module "$name"
  log "$name: creating $venv (python $pyver) and installing $*"
  rm -rf "$venv"
  "$py" -m venv "$venv" >"$LOG_DIR/$name.log" 2>&1 \
    || { tail -n 20 "$LOG_DIR/$name.log" >&2; die "$name: python3 -m venv failed"; }
  "$venv/bin/python" -m pip install -q "$@" >>"$LOG_DIR/$name.log" 2>&1 \
    || { tail -n 20 "$LOG_DIR/$name.log" >&2; die "$name: pip install $* failed (log: $LOG_DIR/$name.log)"; }
  have=$("$venv/bin/python" -c "$check") || die "$name: $* do not import"
  printf '%s\n%s\n' "$key" "$have" > "$STAMP_DIR/$name.stamp"
  log "$name: ready in $((SECONDS - start))s ($have)"
}

# --------------------------------------------------------------------------------------------
# nvcc (cuda.sh, adios2_cuda.sh): KSTAGE_NVCC, else PATH, else the toolkit's default location.
# --------------------------------------------------------------------------------------------
find_nvcc() {
  local n=${KSTAGE_NVCC:-}
  if [ -z "$n" ]; then n=$(command -v nvcc 2>/dev/null || true); fi
  if [ -z "$n" ] && [ -x /usr/local/cuda/bin/nvcc ]; then n=/usr/local/cuda/bin/nvcc; fi
  [ -n "$n" ] && [ -x "$n" ] || die "cuda: no nvcc found (set KSTAGE_NVCC or put the CUDA toolkit's bin/ on PATH)"
  printf '%s\n' "$n"
}
