#!/usr/bin/env bash
# kstage's format and lint checks: clang-format (.clang-format) and clang-tidy (.clang-tidy),
# both version 14 as Debian 12 ships them (clang-format-14, clang-tidy-14; clang-tidy reads
# OpenMP's omp.h from libomp-14-dev).
#
#   scripts/lint.sh format               reformat every C, C++ and CUDA file below (in place)
#   scripts/lint.sh check [BUILD_DIR]    format-check, then tidy BUILD_DIR; without BUILD_DIR
#                                        clang-tidy is skipped, and says so
#   scripts/lint.sh format-check         fail, listing the files clang-format would change (and
#                                        how), when any would change
#   scripts/lint.sh tidy BUILD_DIR       clang-tidy over the lint scope below with
#                                        BUILD_DIR/compile_commands.json (a build configured with
#                                        CMAKE_EXPORT_COMPILE_COMMANDS=ON, e.g. build/default);
#                                        fail on any warning
#   scripts/lint.sh files                the files format and format-check cover
#   scripts/lint.sh tidy-files BUILD_DIR the translation units tidy covers
#
# What is formatted: every .c .h .cpp .hpp .cc .cu .cuh .hip .inl file that git tracks (or that
# is new and not ignored) under FORMAT_DIRS below: the library, its public headers, the bindings,
# the tests, the benchmarks, the examples and the tools. Not formatted: the Fortran sources
# (fortran/*.f90), Python, the fuzz corpora and dictionary, and anything under build/.
#
# What clang-tidy checks (TIDY_SCOPE_RE below): the translation units of what ships -- core/,
# api/, backends/ (the GPU backend of backends/gpu/ through the emulated device's translation
# units), adios2/, the Python extensions (python/src/, python/adios2_src/), tools/ and fortran/'s
# C -- plus examples/cpp/particles, the one cheap translation unit that includes the public C++
# headers (include/kstage/*.hpp). Warnings are reported in those files and in the project's own
# headers (TIDY_HEADERS_RE); never in Kokkos', ADIOS2's, nanobind's or the system's. The tests,
# benchmarks and other examples are left out: ~60 more translation units (~2 more minutes) for
# findings that do not ship. On 2 cores the scope takes ~100 s (test.sh's default build: 58
# units, ~3.2 s of CPU each; KSTAGE_JOBS sets the parallelism, default 2).
#
# CMake files: .cmake-format.yaml is provided for editors and by-hand use (cmake-format 0.6.13),
# and not checked here: the tool is unmaintained since 2020, does not know the newer commands
# the build uses (file(CONFIGURE), ...), and its layout of wrapped conditions and cached
# variables is worse than the hand layout it would replace in 29 of the 38 files.
#
# Environment: CLANG_FORMAT, CLANG_TIDY (the programs; default clang-format-14 / clang-tidy-14,
# else clang-format / clang-tidy, which must then be version 14: another version formats
# differently), KSTAGE_JOBS (parallel clang-format / clang-tidy runs, default 2).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$ROOT"

FORMAT_DIRS=(include api core backends adios2 python/src python/adios2_src tests perf examples
             tools fortran)
FORMAT_EXT_RE='\.(c|h|cpp|hpp|cc|cu|cuh|hip|inl)$'
TIDY_DIRS='core|api|backends|adios2|python/src|python/adios2_src|tools|fortran'
TIDY_SCOPE_RE="^(($TIDY_DIRS)/.*\\.(c|cc|cpp)|examples/cpp/particles/main\\.cpp)\$"
TIDY_HEADERS_RE='(api|core|backends|adios2|include/kstage|python/src|python/adios2_src)/'
JOBS=${KSTAGE_JOBS:-2}

die() { echo "lint.sh: $*" >&2; exit 1; }

# The program for tool $1 (clang-format / clang-tidy), from $2 (its variable) or found; version 14.
find_tool() {
  local name=$1 chosen=$2 version
  if [ -z "$chosen" ]; then
    if command -v "$name-14" >/dev/null 2>&1; then chosen=$name-14
    elif command -v "$name" >/dev/null 2>&1; then chosen=$name
    else
      die "$name is missing: install Debian's $name-14 (scripts/setup.sh --lint does, with apt-get)"
    fi
  fi
  version=$("$chosen" --version 2>/dev/null | grep -oE 'version [0-9]+' | head -n1 | cut -d' ' -f2)
  [ "$version" = 14 ] ||
    die "$chosen is version ${version:-unknown}, not 14 (the version the style is pinned to):" \
        "install Debian's $name-14, or point $(tr a-z- A-Z_ <<<"$name") at one"
  echo "$chosen"
}

# The files format and format-check cover, one per line (defined here only).
format_files() {
  local f
  if git -C "$ROOT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files --cached --others --exclude-standard -- "${FORMAT_DIRS[@]}"
  else
    find "${FORMAT_DIRS[@]}" -type f 2>/dev/null
  fi | grep -E "$FORMAT_EXT_RE" | sort -u | while IFS= read -r f; do
    [ -f "$f" ] && printf '%s\n' "$f"
  done
}

cmd_format() {
  local cf
  cf=$(find_tool clang-format "${CLANG_FORMAT:-}") || return 1
  format_files | xargs -r -d '\n' -P "$JOBS" -n 16 "$cf" -i --style=file --fallback-style=none
  echo "lint.sh: formatted $(format_files | wc -l) files with $("$cf" --version | head -n1)"
}

cmd_format_check() {
  local cf t0=$SECONDS out
  cf=$(find_tool clang-format "${CLANG_FORMAT:-}") || return 1
  out=$(mktemp -d)
  # Each file that would change: its name in $out/list, its diff in $out/<n>.diff.
  # shellcheck disable=SC2016  # expanded by the inner bash
  format_files | CF=$cf OUT=$out xargs -r -d '\n' -P "$JOBS" -n 16 bash -c '
    for f in "$@"; do
      if ! "$CF" --style=file --fallback-style=none "$f" | cmp -s - "$f"; then
        echo "$f" >>"$OUT/list"
        "$CF" --style=file --fallback-style=none "$f" | diff -u "$f" - \
          --label "$f" --label "$f (clang-format)" >"$OUT/$(echo "$f" | tr / _).diff" || true
      fi
    done' _
  local n total
  total=$(format_files | wc -l)
  if [ -s "$out/list" ]; then
    n=$(wc -l <"$out/list")
    echo "lint.sh: clang-format would change $n of $total files:"
    sort "$out/list" | sed 's/^/  /'
    echo "the changes (the first 40 lines of each of the first 10 files):"
    sort "$out/list" | head -n 10 | while IFS= read -r f; do
      head -n 40 "$out/$(echo "$f" | tr / _).diff"
    done
    echo "lint.sh: format check FAILED ($((SECONDS - t0)) s); scripts/lint.sh format fixes it"
    rm -rf "$out"
    return 1
  fi
  rm -rf "$out"
  echo "lint.sh: format check OK: $total files formatted ($((SECONDS - t0)) s," \
       "$("$cf" --version | head -n1))"
}

# The translation units of BUILD_DIR's compile database in the tidy scope, one per line.
tidy_files() {
  local build=$1
  [ -f "$build/compile_commands.json" ] ||
    die "$build/compile_commands.json is missing: configure with -DCMAKE_EXPORT_COMPILE_COMMANDS=ON"
  python3 - "$ROOT" "$build/compile_commands.json" "$TIDY_SCOPE_RE" <<'EOF'
import json, os, re, sys
root, db, scope = sys.argv[1], sys.argv[2], re.compile(sys.argv[3])
seen = set()
for entry in json.load(open(db)):
    path = os.path.realpath(os.path.join(entry.get("directory", ""), entry["file"]))
    rel = os.path.relpath(path, root)
    if scope.match(rel) and rel not in seen and os.path.isfile(path):
        seen.add(rel)
for rel in sorted(seen):
    print(rel)
EOF
}

cmd_tidy() {
  local build=${1:-}
  [ -n "$build" ] || die "tidy needs a build folder (with compile_commands.json)"
  build=$(cd "$build" && pwd -P) || die "no build folder '$1'"
  local ct t0=$SECONDS out files n root_re rc=0
  ct=$(find_tool clang-tidy "${CLANG_TIDY:-}") || return 1
  files=$(tidy_files "$build") || return 1
  [ -n "$files" ] || die "no translation unit of the lint scope in $build/compile_commands.json"
  n=$(wc -l <<<"$files")
  # The project's headers, anchored at this checkout (third-party paths may hold an `adios2/`).
  root_re=$(printf '%s' "$ROOT" | sed 's/[][\.*^$+?(){}|/]/\\&/g')
  # GCC's own include folder, searched last: CMake leaves it out of the compile commands (it is
  # g++'s implicit folder), and fortran/'s C finds gfortran's ISO_Fortran_binding.h there.
  local extra=() gcc_include
  gcc_include=$(gcc -print-file-name=include 2>/dev/null || true)
  if [ -d "$gcc_include" ]; then extra=(--extra-arg=-idirafter"$gcc_include"); fi
  out=$(mktemp)
  echo "lint.sh: clang-tidy over $n translation units ($build, $JOBS at a time)"
  xargs -r -d '\n' -P "$JOBS" -n 1 "$ct" -p "$build" --quiet "${extra[@]}" \
      --header-filter="^$root_re/$TIDY_HEADERS_RE" <<<"$files" >"$out" 2>"$out.err" || rc=$?
  # A header's findings come once per unit that includes it: each distinct one once.
  local findings
  findings=$(grep -E '^[^ ].*:[0-9]+:[0-9]+: (warning|error): ' "$out" | sort -u || true)
  if [ "$rc" -ne 0 ] || [ -n "$findings" ]; then
    cat "$out"
    grep -vE '^[0-9]+ (warnings?|errors?) generated\.$' "$out.err" || true
    echo "lint.sh: clang-tidy findings ($(grep -c . <<<"$findings") distinct):"
    sed "s|^$ROOT/||" <<<"$findings"
    echo "lint.sh: clang-tidy FAILED ($((SECONDS - t0)) s)"
    rm -f "$out" "$out.err"
    return 1
  fi
  rm -f "$out" "$out.err"
  echo "lint.sh: clang-tidy OK: $n translation units, no finding ($((SECONDS - t0)) s," \
       "$("$ct" --version | grep -m1 -o 'version [0-9.]*'))"
}

case ${1:-} in
  format) cmd_format ;;
  format-check) cmd_format_check ;;
  tidy) shift; cmd_tidy "${1:-}" ;;
  check)
    shift
    rc=0
    cmd_format_check || rc=1
    if [ -n "${1:-}" ]; then
      cmd_tidy "$1" || rc=1
    else
      echo "lint.sh: clang-tidy SKIPPED: no build folder given" \
           "(scripts/lint.sh check build/default runs it)"
    fi
    exit "$rc" ;;
  files) format_files ;;
  tidy-files) shift; [ -n "${1:-}" ] || die "tidy-files needs a build folder"; tidy_files "$1" ;;
  -h|--help|help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' ;;
  "") sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' >&2; exit 2 ;;
  *) die "unknown command '$1' (format, check, format-check, tidy, files, tidy-files)" ;;
esac
