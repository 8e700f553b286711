# SPDX-License-Identifier: Apache-2.0
"""The error kstage.usd raises: it names the file, the prim and the attribute it is about."""
from __future__ import annotations

import re


class UsdError(ValueError):
    """A USD scene that cannot be populated or exported as asked.

    ``file``, ``prim`` and ``attribute`` name what it is about (None where it is about no one
    prim or attribute); the message says what is wrong. When kstage refused a write, the
    kstage.Error is the exception's ``__cause__``. Whatever raised it, the stage is unchanged.
    """

    def __init__(self, file, prim, attribute, what):
        self.file, self.prim, self.attribute = file, prim, attribute
        where = ", ".join(x for x in (f"file {file!r}" if file else None,
                                      f"prim {prim!r}" if prim else None,
                                      f"attribute {attribute!r}" if attribute else None) if x)
        super().__init__(f"kstage.usd: {where}: {what}" if where else f"kstage.usd: {what}")


_PATH = re.compile(r"'(/[^']*)'|\"(/[^\"]*)\"|(?<![\w.])(/[\w/:.\-{}\[\]]+)")


def describe_kstage_error(error, paths, names):
    """(prim, attribute) a kstage.Error's message names, as far as it names them."""
    message = str(error)
    prim = None
    for m in _PATH.finditer(message):
        prim = next(g for g in m.groups() if g)
        break
    attribute = None
    for name in names:
        if f"'{name}'" in message or f'"{name}"' in message:
            attribute = name
            break
    return prim, attribute
