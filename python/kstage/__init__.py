# SPDX-License-Identifier: Apache-2.0
"""kstage: a columnar attribute store for simulation data, with DLPack tensor exchange.

A *stage* holds *prims* (entities named by paths such as ``/world/particles/p17``) and their
*attributes* (typed columns). Writes hand data in through DLPack (numpy, PyTorch, CuPy, JAX)
at an ordinal; sealing the ordinal makes them visible; reads hand sealed data out as DLPack
tensors that stay valid until their consumer lets go. This package is a thin layer over the C
API (``kstage/kstage.h``): the same names, the same rules, the same engine.

    import numpy as np, kstage

    stage = kstage.Stage()
    q = stage.query([f"/world/p{i}" for i in range(4)])
    stage.write("pos", q, np.zeros((4, 3), np.float32), 1)
    stage.seal(1)
    for g in stage.read(q, ["pos"]):
        pos = np.from_dlpack(g.tensor(0))   # zero-copy, read-only

Errors raise subclasses of :class:`kstage.Error`, which also derive from the built-in
exception a Python user would catch (``ValueError``, ``KeyError``, ``IndexError``, ...); the
message is the C API's ``kstage_last_error()``.
"""
import atexit as _atexit
import enum as _enum
import os as _os

# kstage initialises Kokkos, whose OpenMP backend warns on every start unless OMP_PROC_BIND is
# set. A library inside a Python process shares its cores with numpy, torch and the caller's
# threads, so it does not pin threads by default: set OMP_PROC_BIND (and OMP_PLACES) yourself,
# before importing kstage, to pin them. (The OpenMP runtime reads them when it is loaded.)
_os.environ.setdefault("OMP_PROC_BIND", "false")

from ._kstage import (  # noqa: E402,F401
    AlreadyExists,
    DeviceError,
    Error,
    Hierarchy,
    InternalError,
    InvalidArgument,
    InvalidHandle,
    Map,
    MapGroup,
    NotFound,
    NotSupported,
    Op,
    OpFailed,
    OutOfMemory,
    OutOfRange,
    Query,
    Read,
    ReadGroup,
    Stage,
    Tensor,
    Timeout,
    Write,
    WriteFloorViolation,
    transfer_counts,
    build_info,
    version,
    flush_log,
    log_message as _log_message,
    _set_log_callback,
)

# The reserved attribute names of the scene (kstage.h's KSTAGE_PRIM_TYPE, ...): a prim's type
# and applied schemas, the hierarchy's names in filters, and the default columns of
# Stage.compute_world_transforms (docs/scene.md).
PRIM_TYPE = "usd-prim-type"
APPLIED_SCHEMAS = "usd-schemas"
PATH_ATTRIBUTE = "usd-path"
PARENT_ATTRIBUTE = "usd-parent"
CHILDREN_ATTRIBUTE = "usd-children"
LOCAL_MATRIX = "omni:xform"
RESET_XFORM_STACK = "omni:resetXformStack"
WORLD_MATRIX = "omni:fabric:worldMatrix"


class LogSeverity(_enum.IntEnum):
    """A log message's severity, and a threshold (kstage.h's kstage_log_severity_t)."""

    DEBUG = 0
    INFO = 1
    WARNING = 2
    ERROR = 3
    OFF = 4  # a threshold only: deliver nothing


def _severity(level) -> int:
    if isinstance(level, str):
        name = level.strip().upper()
        if name == "WARN":
            name = "WARNING"
        if name not in LogSeverity.__members__:
            raise InvalidArgument(
                f"level {level!r} is not one of 'debug', 'info', 'warning', 'error', 'off'")
        return int(LogSeverity[name])
    return int(level)


def set_log_callback(fn, level="warning", channels=None) -> None:
    """Installs ``fn(severity, channel, message)`` as the process's log callback
    (kstage_set_log_callback), or removes it when ``fn`` is None (messages then go to stderr
    as KSTAGE_LOG says).

    ``level`` is the threshold for the channels ``channels`` does not name: a
    :class:`LogSeverity`, an int, or its name ('debug', 'info', 'warning', 'error', 'off').
    ``channels`` gives channels their own level: a dict ``{"device": "debug"}`` or the C filter
    string ``"device=debug,stage=off"``. The channels are 'stage', 'device', 'adios2' and 'api'.

    ``fn`` is called on a kstage thread, one message at a time, with the GIL held;
    ``severity`` is a :class:`LogSeverity`. What it raises goes to ``sys.unraisablehook``
    (the message is dropped), never into kstage. It may call kstage. A malformed setting
    raises :class:`InvalidArgument` and leaves the previous callback installed. The callback
    is removed at interpreter exit.
    """
    if fn is None:
        _set_log_callback(None, int(LogSeverity.OFF), None)
        return
    if not callable(fn):
        raise InvalidArgument(f"fn must be callable or None, not {type(fn).__name__}")
    threshold = _severity(level)
    if isinstance(channels, dict):
        channels = ",".join(
            f"{c}={LogSeverity(_severity(v)).name.lower()}" for c, v in channels.items())

    def deliver(severity, channel, message):
        fn(LogSeverity(severity), channel, message)

    _set_log_callback(deliver, threshold, channels)


def log_message(severity, channel: str, message: str) -> None:
    """Emits ``message`` on one of kstage's channels (kstage_log_message), as kstage's own."""
    _log_message(_severity(severity), channel, message)


# The callback is Python code: it must not be called once the interpreter is finalising.
_atexit.register(lambda: _set_log_callback(None, int(LogSeverity.OFF), None))


def _version_string(v: int) -> str:
    # kstage_version() packs MAJOR * 10000 + MINOR * 100 + PATCH.
    return f"{v // 10000}.{v // 100 % 100}.{v % 100}"


__version__ = _version_string(version())

__all__ = [
    "AlreadyExists",
    "DeviceError",
    "Error",
    "Hierarchy",
    "InternalError",
    "InvalidArgument",
    "InvalidHandle",
    "Map",
    "MapGroup",
    "NotFound",
    "NotSupported",
    "Op",
    "OpFailed",
    "OutOfMemory",
    "OutOfRange",
    "Query",
    "Read",
    "ReadGroup",
    "Stage",
    "Tensor",
    "Timeout",
    "Write",
    "WriteFloorViolation",
    "transfer_counts",
    "build_info",
    "version",
    "LogSeverity",
    "set_log_callback",
    "flush_log",
    "log_message",
    "PRIM_TYPE",
    "APPLIED_SCHEMAS",
    "PATH_ATTRIBUTE",
    "PARENT_ATTRIBUTE",
    "CHILDREN_ATTRIBUTE",
    "LOCAL_MATRIX",
    "RESET_XFORM_STACK",
    "WORLD_MATRIX",
]
