# shellcheck shell=bash
# scripts/setup/jax.sh -- the JAX test venv (sourced by scripts/setup.sh, not a command).
#
# Only with `--jax` or KSTAGE_SETUP_JAX=1: the JAX interop tests (tests/python)
#   - a Python virtual environment in $KSTAGE_DEPS_DIR/jax-venv, made as the others (common.sh),
#     with jax[cpu], numpy and pytest from the machine's configured pip index (~20 s, ~640 MB).
# scripts/test.sh's `default` leg runs these tests with python.sh's venv, which has the same jax.

# The jax the DLPack interop was checked against (JAX speaks legacy DLPack only); pyproject.toml's
# `test` extra pins the same. python.sh's venv has it too.
JAX_PIN="jax[cpu]==0.10.2"

jax_venv() {
  python_venv jax-venv "$DEPS_DIR/jax-venv" 1 \
    'import jax, jaxlib, numpy, pytest; print("jax", jax.__version__, "jaxlib", jaxlib.__version__, "numpy", numpy.__version__, "pytest", pytest.__version__)' \
    "$JAX_PIN" numpy pytest
}
