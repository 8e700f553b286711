# shellcheck shell=bash
# scripts/setup/perf.sh -- the perf suite's venv (sourced by scripts/setup.sh, not a command).
#
# Only with `--perf` or KSTAGE_SETUP_PERF=1 (the default setup never does it): a Python virtual
# environment for the perf suite (docs/performance.md) in $KSTAGE_DEPS_DIR/venv, made with
# `python3 -m venv`, with numpy and matplotlib from the machine's configured pip index (Debian's
# python3-venv is installed with apt-get when the venv module is missing; common.sh).

perf_venv() {
  python_venv venv "$DEPS_DIR/venv" 1 \
    'import numpy, matplotlib; print("numpy", numpy.__version__, "matplotlib", matplotlib.__version__)' \
    numpy matplotlib
}
