# shellcheck shell=bash
# scripts/setup/usd.sh -- OpenUSD for kstage.usd's tests (sourced by scripts/setup.sh, not a command).
#
# With `--python` (KSTAGE_SETUP_PYTHON=1), after python.sh's venv (which has usd-core, Pixar's
# OpenUSD for Python, the `usd` extra of pyproject.toml):
#   - the real USD assets tests/python_package/test_usd.py and examples/python/usd_scene.py use,
#     unpacked from the `newton` wheel on the machine's configured pip index (`pip download
#     --no-deps`: only the wheel, none of its dependencies) into $KSTAGE_DEPS_DIR/usd-assets,
#     keeping the wheel's paths (newton/examples/assets/ant.usda, ...). Nothing of them is copied
#     into the repository. Warp's assets (bunny.usd, square_cloth.usd) come with the warp-lang
#     package the venv already has.
# KSTAGE_USD_ASSETS (the folder) is what the tests read; scripts/test.sh passes it.

NEWTON_PIN="newton==1.8.0"
# The files the tests and the example read (ant_multi references tests/assets/ant.usda).
USD_ASSET_FILES="newton/examples/assets/ant.usda newton/examples/assets/humanoid.usda
newton/examples/assets/cartpole.usda newton/tests/assets/ant.usda newton/tests/assets/ant_multi.usda"

usd_assets_dep() {
  local dir=$DEPS_DIR/usd-assets key start=$SECONDS tmp f
  key="usd-assets recipe=1 wheel=$NEWTON_PIN files=$(echo $USD_ASSET_FILES)"
  if stamp_ok usd-assets "$key" "$dir/newton/tests/assets/ant_multi.usda"; then
    log "usd-assets: cached"
    return 0
  fi
  log "usd-assets: the Newton assets from the $NEWTON_PIN wheel"
  mkdir -p "$WORK_DIR"
  tmp=$(mktemp -d "$WORK_DIR/usd-assets.XXXXXX")
  "$DEPS_DIR/python-venv/bin/python" -m pip download -q --no-deps "$NEWTON_PIN" -d "$tmp" \
    >"$LOG_DIR/usd-assets.log" 2>&1 \
    || { tail -n 20 "$LOG_DIR/usd-assets.log" >&2; rm -rf "$tmp"; die "usd-assets: pip download $NEWTON_PIN failed"; }
  rm -rf "$dir"
  mkdir -p "$dir"
  # shellcheck disable=SC2086  # USD_ASSET_FILES is a list of paths
  "$DEPS_DIR/python-venv/bin/python" - "$tmp"/newton-*.whl "$dir" $USD_ASSET_FILES <<'PY' \
    || { rm -rf "$tmp"; die "usd-assets: the wheel lacks a file the tests need"; }
import sys, zipfile
wheel, out, names = sys.argv[1], sys.argv[2], sys.argv[3:]
with zipfile.ZipFile(wheel) as z:
    for n in names:
        z.extract(n, out)
PY
  rm -rf "$tmp"
  for f in $USD_ASSET_FILES; do [ -f "$dir/$f" ] || die "usd-assets: $f was not unpacked"; done
  printf '%s\n%s\n' "$key" "$(echo $USD_ASSET_FILES | wc -w) files" > "$STAMP_DIR/usd-assets.stamp"
  log "usd-assets: ready in $((SECONDS - start))s ($dir)"
}
