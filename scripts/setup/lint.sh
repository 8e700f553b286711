# shellcheck shell=bash
# scripts/setup/lint.sh -- the format and lint tools (sourced by scripts/setup.sh, not a command).
#
# Only with `--lint` or KSTAGE_SETUP_LINT=1 (scripts/test.sh passes it unless KSTAGE_TEST_LINT=0):
# Debian 12's clang-format-14 and clang-tidy-14, installed with apt-get when missing, for
# scripts/lint.sh (.clang-format, .clang-tidy); and libomp-14-dev, whose omp.h clang-tidy needs to
# read Kokkos' OpenMP headers (g++'s omp.h is not on clang's path). Version 14 exactly: another
# clang-format lays the code out differently, and lint.sh refuses it.

ensure_lint_tools() {
  local missing=()
  command -v clang-format-14 >/dev/null 2>&1 || missing+=(clang-format-14)
  command -v clang-tidy-14 >/dev/null 2>&1 || missing+=(clang-tidy-14)
  [ -f /usr/lib/llvm-14/lib/clang/14.0.6/include/omp.h ] ||
    compgen -G '/usr/lib/llvm-14/lib/clang/*/include/omp.h' >/dev/null || missing+=(libomp-14-dev)
  if [ "${#missing[@]}" -gt 0 ]; then
    log "installing the format and lint tools: ${missing[*]}"
    system_apt_install "${missing[@]}"
  fi
  command -v clang-format-14 >/dev/null 2>&1 || die "clang-format-14 is still missing"
  command -v clang-tidy-14 >/dev/null 2>&1 || die "clang-tidy-14 is still missing"
  log "lint: $(clang-format-14 --version | head -n1), $(clang-tidy-14 --version | grep -m1 -o 'version [0-9.]*')"
}
