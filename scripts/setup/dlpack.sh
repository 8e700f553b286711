# shellcheck shell=bash
# scripts/setup/dlpack.sh -- DLPack (sourced by scripts/setup.sh, not a command).
#
# DLPack >= 1.0 headers + CMake config, from Debian's libdlpack-dev (trixie), downloaded with the
# private apt of common.sh and unpacked into $KSTAGE_DEPS_DIR/usr-prefix.

DLPACK_PKG=libdlpack-dev/trixie
DLPACK_RECIPE=1

dlpack_dep() {
  deb_dep dlpack "$DLPACK_PKG" "$DLPACK_RECIPE" \
    "$USR_PREFIX/usr/include/dlpack/dlpack.h"
}
