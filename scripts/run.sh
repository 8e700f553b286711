#!/usr/bin/env bash
# The kstage main job: get the dependencies, build the "default" preset (Release, OpenMP host
# execution) and run the particles example, which prints its report.
#
#   scripts/run.sh [arguments for the particles example]
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

JOBS=${KSTAGE_JOBS:-2}
PRESET=default
EXAMPLE=$ROOT/build/$PRESET/examples/c/particles/kstage_example_particles

bash "$ROOT/scripts/setup.sh"
cmake --preset "$PRESET"
cmake --build --preset "$PRESET" -j "$JOBS"

if [ ! -x "$EXAMPLE" ]; then
  echo "run.sh: $EXAMPLE was not built (is examples/c/particles part of the build?)" >&2
  exit 1
fi

# Kokkos 3.4's OpenMP backend warns on stdout when OMP_PROC_BIND is unset.
export OMP_PROC_BIND=${OMP_PROC_BIND:-spread}
export OMP_PLACES=${OMP_PLACES:-threads}

echo
echo "==== kstage particles example ===="
exec "$EXAMPLE" "$@"
