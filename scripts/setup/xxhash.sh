# shellcheck shell=bash
# scripts/setup/xxhash.sh -- xxHash (sourced by scripts/setup.sh, not a command).
#
# xxHash's header (xxhash.h: XXH3-64, used header-only with XXH_INLINE_ALL by the ADIOS2 bridge's
# checkpoint manifest and step checksums), from Debian's libxxhash-dev (trixie, 0.8.3), downloaded
# with the private apt of common.sh and unpacked into $KSTAGE_DEPS_DIR/usr-prefix. Header-only
# use means no run-time library to ship or to find (a wheel, the GPU bundle).

XXHASH_PKG=libxxhash-dev/trixie
XXHASH_RECIPE=1

xxhash_dep() {
  deb_dep xxhash "$XXHASH_PKG" "$XXHASH_RECIPE" \
    "$USR_PREFIX/usr/include/xxhash.h"
}
