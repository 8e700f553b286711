# shellcheck shell=bash
# scripts/setup/catch2.sh -- Catch2 (sourced by scripts/setup.sh, not a command).
#
# Catch2 3 (static libs + CMake config), from Debian's libcatch2-dev (bookworm-backports: Debian
# 12's own catch2 is 2.x), downloaded with the private apt of common.sh and unpacked into
# $KSTAGE_DEPS_DIR/usr-prefix.

CATCH2_PKG=libcatch2-dev/bookworm-backports
CATCH2_RECIPE=1

catch2_dep() {
  deb_dep catch2 "$CATCH2_PKG" "$CATCH2_RECIPE" \
    "$USR_PREFIX/usr/lib/cmake/Catch2/Catch2Config.cmake"
}
