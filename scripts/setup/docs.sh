# shellcheck shell=bash
# scripts/setup/docs.sh -- doxygen (sourced by scripts/setup.sh, not a command).
#
# Only with `--docs` or KSTAGE_SETUP_DOCS=1 (scripts/test.sh passes it for the `default` preset):
# Debian's doxygen, installed with apt-get when missing, for the API reference (the docs target,
# cmake/kstageDocs.cmake; ctest docs_reference).

ensure_docs_tools() {
  if ! command -v doxygen >/dev/null 2>&1; then
    log "installing doxygen for the API reference (the docs target)"
    system_apt_install doxygen
  fi
  command -v doxygen >/dev/null 2>&1 || die "doxygen is still missing"
  log "docs: doxygen $(doxygen --version)"
}
