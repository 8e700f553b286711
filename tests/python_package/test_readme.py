# SPDX-License-Identifier: Apache-2.0
"""The README's Python quick start runs as written (so the README cannot drift from the API)."""
import pathlib
import re

import pytest

np = pytest.importorskip("numpy", minversion="2.1")

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def quick_start():
    text = README.read_text(encoding="utf-8")
    section = text.split("### Python quick start", 1)
    assert len(section) == 2, "README.md has no '### Python quick start' section"
    match = re.search(r"```python\n(.*?)```", section[1], re.S)
    assert match, "the Python quick start has no ```python block"
    return match.group(1)


def test_quick_start_runs(capsys):
    code = quick_start()
    namespace = {"__name__": "readme_quick_start"}
    exec(compile(code, "README.md (Python quick start)", "exec"), namespace)  # noqa: S102
    out = capsys.readouterr().out
    # It prints each attribute's paths and rows: the written values, in prim order.
    assert "pos ['/world/p0', '/world/p1', '/world/p2', '/world/p3']" in out
    assert "vel ['/world/p0', '/world/p1', '/world/p2', '/world/p3']" in out
    stage = namespace["stage"]
    assert stage.write_floor("mass") == 2
    (g,) = stage.read(namespace["q"], "mass")
    assert np.from_dlpack(g).tolist() == [1.0, 1.0, 1.0, 1.0]
