# SPDX-License-Identifier: Apache-2.0
"""kstage with ADIOS2: checkpoints, restarts and streams of a stage's sealed state.

    import kstage.adios2 as ka
    ka.checkpoint(stage, "run.bp")                 # every attribute of every prim, one BP5 step
    ordinal = ka.restart(fresh, "run.bp")          # the file's steps into a fresh stage
    ka.checkpoint_latest(stage, "run")             # run.0 or run.1, then the pointer "run"
    ordinal = ka.restart_latest(fresh, "run")      # the checkpoint "run" names, verified
    with ka.Stream("ticks.bp") as w:               # engine="BP5" | "SST" | "Inline", parameters={}
        w.write_step(stage)                        # a full step of every existing prim
        w.write_step(stage, change_range=(k, k))   # then what changed, with deletions
    with ka.Stream("ticks.bp", "r") as r:
        for ordinal in r.steps(other):             # each step read into `other`
            ...

On MPI ranks (where the bridge has its MPI form: an MPI ADIOS2), pass an mpi4py communicator:
every rank writes its block, any number of ranks reads back (docs/adios2.md, "On MPI ranks"):

    from mpi4py import MPI
    ka.checkpoint(stage, "run.bp", comm=MPI.COMM_WORLD)
    ordinal = ka.restart(fresh, "run.bp", comm=MPI.COMM_WORLD)
    with ka.Stream("ticks.bp", comm=MPI.COMM_WORLD) as w: ...

The bridge's C API (kstage/kstage_adios2.h, kstage_adios2_mpi.h) underneath; docs/adios2.md has
the file layout.
Only where kstage was built with its ADIOS2 bridge (KSTAGE_WITH_ADIOS2): an import error says so
otherwise.
"""
from __future__ import annotations

import kstage

try:
    from . import _adios2
except ImportError as e:  # pragma: no cover - depends on the build
    raise ImportError(
        "kstage.adios2: this kstage was built without its ADIOS2 bridge "
        "(build it where ADIOS2 is found: scripts/setup.sh --adios2, or ADIOS2_ROOT)") from e

_OK, _END_OF_ITERATION, _TIMEOUT = 0, 7, 8
_CLASSES = {1: kstage.InvalidArgument, 2: kstage.InvalidHandle, 3: kstage.NotFound,
            4: kstage.AlreadyExists, 5: kstage.WriteFloorViolation, 6: kstage.NotSupported,
            8: kstage.Timeout, 9: kstage.OutOfMemory, 10: kstage.OutOfRange, 11: kstage.OpFailed,
            12: kstage.DeviceError, 13: kstage.InternalError}
_INFINITE = (1 << 64) - 1


def _check(status):
    if status != _OK:
        raise _CLASSES.get(status, kstage.Error)(_adios2.last_error())


def _fortran_comm(comm):
    """A communicator (mpi4py's, or its Fortran handle as an int) for the MPI calls."""
    if not getattr(_adios2, "has_mpi", False):
        raise kstage.NotSupported("kstage.adios2: this kstage's ADIOS2 bridge has no MPI form "
                                  "(build it against an MPI ADIOS2: scripts/setup.sh --adios2-mpi)")
    handle = comm.py2f() if hasattr(comm, "py2f") else comm
    if not isinstance(handle, int) or handle < 0:
        raise TypeError(f"comm must be an mpi4py communicator (or its Fortran handle), not {comm!r}")
    return handle


def checkpoint(stage, path, comm=None):
    """Every attribute of every existing prim of `stage` as one full step of a new BP5 file; on
    the ranks of `comm` (collective), each rank's stage its block of the step."""
    if comm is None:
        _check(_adios2.checkpoint(stage.handle, str(path)))
    else:
        handle = _fortran_comm(comm)
        _check(_adios2.checkpoint_mpi(stage.handle, str(path), handle))


_MANIFEST = {"default": 0, "if_present": 1, "required": 2}


def restart(stage, path, comm=None, *, manifest="default"):
    """Every step of the BP5 file at `path` into `stage`, in order; the last step's ordinal. On
    the ranks of `comm` (collective), each rank reads its share of the writers' blocks.

    The folder is checked against its manifest (kstage.manifest) before ADIOS2 opens it: a
    damaged file raises kstage.OpFailed naming it. `manifest`: "default" (a folder without one
    is read unchecked, with a warning on the "adios2" log channel), "if_present" (silently), or
    "required" (verified restarts only: no manifest raises kstage.InvalidArgument)."""
    if manifest not in _MANIFEST:
        raise ValueError(f"manifest must be one of {sorted(_MANIFEST)}, not {manifest!r}")
    if comm is None:
        if manifest == "default":
            status, ordinal = _adios2.restart(stage.handle, str(path))
        else:
            status, ordinal = _adios2.restart_ex(stage.handle, str(path), _MANIFEST[manifest])
    else:
        handle = _fortran_comm(comm)
        if manifest == "default":
            status, ordinal = _adios2.restart_mpi(stage.handle, str(path), handle)
        else:
            status, ordinal = _adios2.restart_ex_mpi(stage.handle, str(path), _MANIFEST[manifest],
                                                     handle)
    _check(status)
    return ordinal


def checkpoint_latest(stage, pointer, comm=None):
    """A checkpoint made the latest, durably (docs/adios2.md, "A checkpoint that survives a
    crash"): written to `<pointer>.0` or `<pointer>.1` (the one `pointer` does not name), flushed
    and sealed, then the file `pointer` replaced atomically to name it. On the ranks of `comm`
    (collective): each rank writes its block; rank 0 reads and replaces the pointer."""
    if comm is None:
        _check(_adios2.checkpoint_latest(stage.handle, str(pointer)))
    else:
        _check(_adios2.checkpoint_latest_mpi(stage.handle, str(pointer), _fortran_comm(comm)))


def restart_latest(stage, pointer, comm=None):
    """A restart from the checkpoint the file `pointer` names (checkpoint_latest's), its manifest
    required; the checkpoint's ordinal. On the ranks of `comm` (collective): the checkpoint rank 0's
    reading of the pointer names, on every rank."""
    if comm is None:
        status, ordinal = _adios2.restart_latest(stage.handle, str(pointer))
    else:
        status, ordinal = _adios2.restart_latest_mpi(stage.handle, str(pointer),
                                                     _fortran_comm(comm))
    _check(status)
    return ordinal


class Stream:
    """An ADIOS2 engine the bridge writes steps to (mode "w") or reads steps from ("r")."""

    def __init__(self, name, mode="w", *, engine="BP5", parameters=None, inline_writer=None, comm=None):
        """comm: an mpi4py communicator, whose ranks then write or read every step together."""
        if mode not in ("w", "r"):
            raise ValueError(f"mode must be 'w' or 'r', not {mode!r}")
        pairs = []
        for key, value in (parameters or {}).items():
            pairs += [str(key), str(value)]
        self._handle = 0
        status, self._handle = _adios2.open(str(name), 0 if mode == "w" else 1, engine, pairs,
                                            inline_writer._handle if inline_writer else 0,
                                            -1 if comm is None else _fortran_comm(comm))
        _check(status)
        self.mode = mode

    def write_step(self, stage, query=None, attrs=None, *, change_range=None):
        """One step: the sealed state of `attrs` (None: every attribute) for `query` (None: every
        existing prim); change_range=(first, last) for an incremental step with deletions. A
        deletion is in the step only for a prim the query names: the default names the existing
        prims alone, so pass a query of the prims that may have been deleted (a path range's
        query_range, their paths) for an incremental step."""
        tokens = [] if attrs is None else [stage.token(a) if isinstance(a, str) else int(a)
                                            for a in ([attrs] if isinstance(attrs, (str, int)) else attrs)]
        owned = query is None
        q = stage.query() if owned else query
        begin, end = change_range if change_range is not None else (0, 0)
        try:
            _check(_adios2.write_step(self._handle, stage.handle, q.handle, tokens,
                                      change_range is not None, begin, end))
        finally:
            if owned:
                q.release()

    def read_step(self, stage, timeout=None):
        """The next step into `stage`: its ordinal, or None at the end of the stream. `timeout`
        in seconds (None: wait); kstage.Timeout when the step is not ready in time."""
        ns = _INFINITE if timeout is None else max(0, int(timeout * 1e9))
        status, ordinal = _adios2.read_step(self._handle, stage.handle, ns)
        if status == _END_OF_ITERATION:
            return None
        _check(status)
        return ordinal

    def steps(self, stage, timeout=None):
        """Reads every step into `stage`, yielding each one's ordinal."""
        while (ordinal := self.read_step(stage, timeout)) is not None:
            yield ordinal

    def close(self):
        """Closes the stream (idempotent)."""
        if self._handle:
            handle, self._handle = self._handle, 0
            _check(_adios2.close(handle))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
