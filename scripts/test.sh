#!/usr/bin/env bash
# The kstage test command (what CI runs): get the dependencies, then for each preset
# configure, build and run the whole ctest suite.
#
#   scripts/test.sh                 presets "default" and "asan"
#   KSTAGE_TEST_PRESETS="serial debug" scripts/test.sh
#   KSTAGE_JOBS=4 scripts/test.sh   build parallelism (default 2)
#
# Exits non-zero if any step of any preset fails.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

PRESETS=${KSTAGE_TEST_PRESETS:-default asan}
JOBS=${KSTAGE_JOBS:-2}

bash "$ROOT/scripts/setup.sh"

LOG_DIR=$ROOT/build/test-logs
mkdir -p "$LOG_DIR"

failed_presets=()
total_passed=0
total_failed=0
for preset in $PRESETS; do
  echo
  echo "==== kstage: preset '$preset' ===="
  if ! cmake --preset "$preset"; then
    echo "==== preset '$preset': configure FAILED"
    failed_presets+=("$preset(configure)"); continue
  fi
  if ! cmake --build --preset "$preset" -j "$JOBS"; then
    echo "==== preset '$preset': build FAILED"
    failed_presets+=("$preset(build)"); continue
  fi
  rc=0
  ctest --preset "$preset" 2>&1 | tee "$LOG_DIR/ctest-$preset.log" || rc=$?
  # "NN% tests passed, F tests failed out of T"
  summary=$(grep -E '^[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$LOG_DIR/ctest-$preset.log" | tail -n1 || true)
  if [ -n "$summary" ]; then
    f=$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\1/' <<<"$summary")
    t=$(sed -E 's/.* failed out of ([0-9]+).*/\1/' <<<"$summary")
    total_failed=$((total_failed + f))
    total_passed=$((total_passed + t - f))
  fi
  if [ "$rc" -ne 0 ] || [ -z "$summary" ]; then
    echo "==== preset '$preset': tests FAILED"
    failed_presets+=("$preset(test)")
  else
    echo "==== preset '$preset': OK"
  fi
done

echo
if [ "${#failed_presets[@]}" -gt 0 ]; then
  echo "kstage test.sh: FAILED presets: ${failed_presets[*]}"
  echo "tests: $total_passed passed, $total_failed failed"
  exit 1
fi
echo "kstage test.sh: all presets passed ($PRESETS)"
echo "tests: $total_passed passed, $total_failed failed"
