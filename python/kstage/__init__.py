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
    "PRIM_TYPE",
    "APPLIED_SCHEMAS",
    "PATH_ATTRIBUTE",
    "PARENT_ATTRIBUTE",
    "CHILDREN_ATTRIBUTE",
    "LOCAL_MATRIX",
    "RESET_XFORM_STACK",
    "WORLD_MATRIX",
]
