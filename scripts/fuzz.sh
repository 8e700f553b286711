#!/usr/bin/env bash
# Fuzz the kstage C API for a bounded time (tests/fuzz/fuzz_capi.cpp, libFuzzer + ASan + UBSan).
#
#   scripts/fuzz.sh                       configure + build the `fuzz` preset, fuzz for 60 s
#   KSTAGE_FUZZ_SECONDS=600 scripts/fuzz.sh
#   scripts/fuzz.sh -only_ascii=1 ...     extra arguments go to libFuzzer
#
# Environment:
#   KSTAGE_FUZZ_SECONDS  fuzzing time in seconds (default 60; 0 = build and replay the seeds only)
#   KSTAGE_FUZZ_JOBS     parallel fuzzing processes (default 1; libFuzzer -fork=N when > 1)
#   KSTAGE_FUZZ_WORKDIR  scratch folder (default build/fuzz-run); the seed corpus is copied there,
#                        new inputs and crash artifacts are written there, never into the tree
#   KSTAGE_FUZZ_TRACE=1  print every C API call (to read a crash: run the binary on the artifact)
#   KSTAGE_JOBS          build parallelism (default 2)
#   KSTAGE_DEPS_DIR      dependency cache (as for scripts/setup.sh)
#   KSTAGE_SKIP_SETUP=1  do not run scripts/setup.sh --fuzz first (scripts/test.sh already did)
#
# Exits non-zero if the build fails or libFuzzer reports anything (crash, sanitizer report,
# leak, timeout, out-of-memory, oracle failure); the reproducer is in $KSTAGE_FUZZ_WORKDIR/artifacts.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

SECONDS_TO_FUZZ=${KSTAGE_FUZZ_SECONDS:-60}
FUZZ_JOBS=${KSTAGE_FUZZ_JOBS:-1}
JOBS=${KSTAGE_JOBS:-2}
WORK=${KSTAGE_FUZZ_WORKDIR:-$ROOT/build/fuzz-run}
case $SECONDS_TO_FUZZ in ''|*[!0-9]*) echo "fuzz.sh: KSTAGE_FUZZ_SECONDS must be a number" >&2; exit 2 ;; esac

if [ "${KSTAGE_SKIP_SETUP:-0}" != 1 ]; then
  bash "$ROOT/scripts/setup.sh" --fuzz
fi
if [ -z "${HOME:-}" ]; then HOME=$(getent passwd "$(id -u)" | cut -d: -f6); export HOME; fi
DEPS_DIR=${KSTAGE_DEPS_DIR:-$HOME/.cache/kstage-deps}

t0=$(date +%s)
cmake --preset fuzz -DKokkos_ROOT="$DEPS_DIR/kokkos-serial"
cmake --build --preset fuzz -j "$JOBS"   # the library and kstage_fuzz_capi
t1=$(date +%s)
echo "fuzz.sh: build took $((t1 - t0)) s"
BIN=$ROOT/build/fuzz/tests/fuzz/kstage_fuzz_capi

rm -rf "$WORK"
mkdir -p "$WORK/corpus" "$WORK/artifacts"
cp "$ROOT"/tests/fuzz/corpus/* "$WORK/corpus/" 2>/dev/null || true
DICT=()
[ -f "$ROOT/tests/fuzz/dict" ] && DICT=(-dict="$ROOT/tests/fuzz/dict")

# Leaks are findings too; UBSan stops at the first report (-fno-sanitize-recover=undefined).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

LOG=$WORK/fuzz.log
rc=0
if [ "$SECONDS_TO_FUZZ" -eq 0 ]; then
  echo "fuzz.sh: KSTAGE_FUZZ_SECONDS=0: replaying the seed corpus only"
  "$BIN" -rss_limit_mb=4096 "$ROOT"/tests/fuzz/corpus/* 2>&1 | tee "$LOG" | tail -n 5 || rc=$?
else
  FORK=()
  [ "$FUZZ_JOBS" -gt 1 ] && FORK=(-fork="$FUZZ_JOBS" -ignore_crashes=0)
  echo "fuzz.sh: fuzzing for $SECONDS_TO_FUZZ s (log: $LOG)"
  # -timeout: one input taking over 10 s is a hang; -rss_limit_mb / -malloc_limit_mb: the
  # fuzzer makes ASan return NULL above 2 GiB per allocation, so kstage has to cope.
  "$BIN" "$WORK/corpus" "${DICT[@]}" "${FORK[@]}" \
    -max_total_time="$SECONDS_TO_FUZZ" -timeout=10 -rss_limit_mb=4096 -malloc_limit_mb=3072 \
    -max_len=4096 -print_final_stats=1 -artifact_prefix="$WORK/artifacts/" "$@" \
    >"$LOG" 2>&1 || rc=$?
  grep -E '^#[0-9]+' "$LOG" | tail -n 3 || true
fi

execs=$(grep -E '^stat::number_of_executed_units' "$LOG" | awk '{print $2}' | tail -n1)
rate=$(grep -E '^stat::average_exec_per_sec' "$LOG" | awk '{print $2}' | tail -n1)
peak=$(grep -oE 'exec/s: [0-9]+' "$LOG" | awk '{print $2}' | sort -n | tail -n1)
cov=$(grep -oE 'cov: [0-9]+' "$LOG" | tail -n1 | awk '{print $2}')
if [ "$rc" -ne 0 ] || ls "$WORK"/artifacts/* >/dev/null 2>&1; then
  echo "---- fuzz.log (tail) ----"
  tail -n 60 "$LOG"
  echo "fuzz.sh: FAILED (rc=$rc); reproducer(s):"
  ls -l "$WORK"/artifacts/ || true
  echo "reproduce: KSTAGE_FUZZ_TRACE=1 $BIN <artifact>"
  exit 1
fi
echo "fuzz.sh: OK: ${execs:-?} executions, average ${rate:-?} exec/s (peak ${peak:-?} exec/s), coverage ${cov:-?}"
