# SPDX-License-Identifier: Apache-2.0
"""USD -> stage: populate a stage from a composed USD scene, and re-sample its time-varying values.

One traversal reads every prim's type, applied schemas, authored attributes, relationships and
local transform (the values USD's own API returns, one call each: that is what any loader pays).
The values are gathered per (attribute, USD type) into one numpy array -- through Vt arrays and
the buffer protocol, never one Python object per number -- and written as one
kstage.Stage.write_batch per set of prims (the columns of the same prims together). The caller
seals the ordinal.
"""
from __future__ import annotations

import dataclasses
import os

import numpy as np

import kstage

from . import _mapping
from ._errors import UsdError, describe_kstage_error

# The reserved columns (kstage/__init__.py's names).
PRIM_TYPE = "usd-prim-type"
APPLIED_SCHEMAS = "usd-schemas"
LOCAL_MATRIX = "omni:xform"
RESET_XFORM_STACK = "omni:resetXformStack"


def _pxr():
    try:
        from pxr import Gf, Sdf, Usd, UsdGeom, Vt  # noqa: F401
    except ImportError as e:  # pragma: no cover - the extra is missing
        raise ImportError("kstage.usd needs OpenUSD's Python modules: pip install kstage[usd] "
                          "(usd-core)") from e
    import pxr
    return pxr


@dataclasses.dataclass
class Unmapped:
    """An authored value that has no column (populate) or no USD type (export)."""

    prim: str
    name: str
    type: str
    reason: str


@dataclasses.dataclass
class PopulateReport:
    """What a populate or re-sample wrote, and everything it did not."""

    source: str
    prims: int = 0
    values: int = 0                      # (prim, attribute) values written
    columns: dict = dataclasses.field(default_factory=dict)  # (name, usd type) -> prims
    unmapped: list = dataclasses.field(default_factory=list)  # Unmapped
    time_varying: int = 0                # attributes (and transforms) a re-sample rewrites

    def __str__(self) -> str:
        lines = [f"{self.source}: {self.prims} prims, {self.values} values in "
                 f"{len(self.columns)} columns, {self.time_varying} time-varying, "
                 f"{len(self.unmapped)} not mapped"]
        lines += [f"  not mapped: {u.prim}.{u.name} ({u.type}): {u.reason}" for u in self.unmapped]
        return "\n".join(lines)


def open_usd(source):
    """(Usd.Stage, label) from a path, a usda string, an Sdf.Layer or a Usd.Stage."""
    pxr = _pxr()
    Usd, Sdf = pxr.Usd, pxr.Sdf
    if isinstance(source, Usd.Stage):
        return source, source.GetRootLayer().identifier
    if isinstance(source, Sdf.Layer):
        return Usd.Stage.Open(source), source.identifier
    if isinstance(source, str) and source.lstrip().startswith("#usda"):
        layer = Sdf.Layer.CreateAnonymous(".usda")
        try:
            ok = layer.ImportFromString(source)
        except Exception as e:  # usd-core raises Tf.ErrorException
            raise UsdError("<usda text>", None, None, f"usd-core cannot parse the text: {e}") \
                from None
        if not ok:
            raise UsdError("<usda text>", None, None, "usd-core cannot parse the text")
        return Usd.Stage.Open(layer), "<usda text>"
    path = os.fspath(source)
    if not os.path.exists(path):
        raise FileNotFoundError(f"kstage.usd: no USD file {path!r}")
    if not os.access(path, os.R_OK):
        raise PermissionError(f"kstage.usd: USD file {path!r} is not readable")
    try:
        stage = Usd.Stage.Open(path)
    except Exception as e:  # usd-core raises Tf.ErrorException
        raise UsdError(path, None, None, f"usd-core cannot open it: {e}") from None
    if stage is None:
        raise UsdError(path, None, None, "usd-core cannot open it")
    return stage, path


class _Column:
    """One (name, USD type)'s values, gathered in traversal order before the write."""

    __slots__ = ("name", "usd", "rows", "values", "attrs")

    def __init__(self, name: str, usd: _mapping.UsdType):
        self.name, self.usd = name, usd
        self.rows: list[int] = []
        self.values: list = []
        self.attrs: list = []  # Usd.AttributeQuery of each time-varying value (re-sample)


class _Tokens:
    """Token and path ids of one stage, each string interned once."""

    def __init__(self, stage):
        self.stage, self.ids = stage, {}

    def token(self, text: str) -> int:
        if not text:
            return 0
        t = self.ids.get(text)
        if t is None:
            t = self.ids[text] = self.stage.token(text)
        return t

    def paths(self, paths) -> np.ndarray:
        if not paths:
            return np.zeros(0, np.uint64)
        return np.asarray(self.stage.intern([p if isinstance(p, str) else p.pathString
                                             for p in paths]), np.uint64).reshape(-1)


def _numeric(column: _Column, pxr) -> list | np.ndarray:
    t = column.usd
    dtype, lanes = t.schema.dtype, t.schema.lanes
    if t.schema.is_array:
        return [np.asarray(v, dtype).reshape(-1, lanes) if lanes > 1 else
                np.asarray(v, dtype).reshape(-1) for v in column.values]
    scalar = t.name
    if t.shape == ():
        a = np.asarray(column.values, dtype)
    else:
        array_type = pxr.Sdf.ValueTypeNames.Find(scalar + "[]").type.pythonClass
        a = np.asarray(array_type(column.values), dtype)
    return a.reshape(len(column.values), lanes) if lanes > 1 else a.reshape(-1)


def _convert(column: _Column, tokens: _Tokens, pxr):
    """The column's values as what Stage.write takes: an (n, lanes) array, or a list of arrays."""
    t = column.usd
    fam = t.family
    if fam == _mapping.NUMERIC:
        return _numeric(column, pxr)
    if fam == _mapping.TIME_CODE:
        conv = lambda v: float(v.GetValue()) if hasattr(v, "GetValue") else float(v)  # noqa: E731
        if t.schema.is_array:
            return [np.asarray([conv(x) for x in v], np.float64) for v in column.values]
        return np.asarray([conv(v) for v in column.values], np.float64)
    if fam in (_mapping.TOKEN, _mapping.PATH_EXPRESSION):
        text = str if fam == _mapping.TOKEN else (lambda e: e.GetText())  # noqa: E731
        if t.schema.is_array:
            return [np.asarray([tokens.token(text(x)) for x in v], np.uint64) for v in column.values]
        return np.asarray([tokens.token(text(v)) for v in column.values], np.uint64)
    if fam == _mapping.ASSET:
        def pair(a):
            return (tokens.token(a.path), tokens.token(a.resolvedPath))
        if t.schema.is_array:
            return [np.asarray([pair(x) for x in v], np.uint64).reshape(-1, 2)
                    for v in column.values]
        return np.asarray([pair(v) for v in column.values], np.uint64).reshape(-1, 2)
    if fam == _mapping.STRING:
        return [np.frombuffer(v.encode("utf-8"), np.uint8) for v in column.values]
    raise AssertionError(fam)


def _write_spec(schema: _mapping.Schema, data):
    """A kstage.Write of one column's rows (in its prims' order) for Stage.write_batch."""
    if schema.is_array:
        counts = np.asarray([len(a) for a in data], np.int64)
        width = (schema.lanes,) if schema.lanes > 1 else ()
        packed = (np.concatenate(data) if data else np.zeros((0,) + width, schema.dtype))
        packed = packed.astype(schema.dtype, copy=False).reshape((-1,) + width)
        return kstage.Write(packed, row_counts=counts, semantic=schema.semantic)
    return kstage.Write(data, semantic=schema.semantic)


class Population:
    """A stage populated from a USD scene: re-sample it with :meth:`resample`.

    Holds the composed Usd.Stage, the populated prims (in traversal order, as the query
    ``query``) and the time-varying attributes and transforms a re-sample rewrites.
    """

    def __init__(self, stage, usd_stage, label, ordinal, time):
        self.stage, self.usd_stage, self.source = stage, usd_stage, label
        self.ordinal, self.time = ordinal, time
        self.paths: list[str] = []
        self.query = None
        self.ids = None  # the prims' path ids, in traversal order
        self.report = PopulateReport(label)
        self._varying: dict = {}      # (name, usd type) -> _Column of time-varying values
        self._varying_xforms: list = []  # (row, UsdGeom.Xformable)

    def resample(self, ordinal: int, time) -> PopulateReport:
        """Writes, at `ordinal`, the time-varying attributes and transforms sampled at `time`.

        Only what USD says might vary is read and written (Usd.Attribute.ValueMightBeTimeVarying,
        UsdGeom.Xformable.TransformMightBeTimeVarying); one write_batch, all or nothing. The
        caller seals `ordinal`."""
        pxr = _pxr()
        report = PopulateReport(self.source, prims=len(self.paths))
        columns = []
        for key, old in self._varying.items():
            col = _Column(old.name, old.usd)
            for row, attr in zip(old.rows, old.attrs):
                v = attr.Get(time)
                if v is not None:
                    col.rows.append(row)
                    col.values.append(v)
            if col.rows:
                columns.append(col)
        xform_rows, mats, resets = [], [], []
        for row, xf in self._varying_xforms:
            xform_rows.append(row)
            mats.append(xf.GetLocalTransformation(time))
            resets.append(xf.GetResetXformStack())
        _write_all(self, pxr, columns, xform_rows, mats, resets, ordinal, report)
        return report


def _write_all(pop, pxr, columns, xform_rows, mats, resets, ordinal, report):
    """Converts every column, checks what kstage would refuse, then writes.

    The columns go as one write_batch per set of prims (the columns of the same prims share a
    query: no masks, no padding). Every conversion and every refusal kstage can foresee -- a
    prim that holds a name in another schema, an ordinal at or below a name's write floor -- is
    checked before the first write, so a refusal changes nothing."""
    stage = pop.stage
    tokens = _Tokens(stage)
    entries = []  # (name, schema, rows, kstage.Write)
    for col in columns:
        try:
            data = _convert(col, tokens, pxr)
        except Exception as e:
            raise UsdError(pop.source, pop.paths[col.rows[0]], col.name,
                           f"its {col.usd.name} values do not convert: {e}") from e
        entries.append((col.name, col.usd.schema, col.rows,
                        _write_spec(col.usd.schema, data)))
        report.columns[(col.name, col.usd.name)] = len(col.rows)
        report.values += len(col.rows)
    if xform_rows:
        m = np.asarray(pxr.Vt.Matrix4dArray(mats), np.float64).reshape(-1, 16)
        r = np.asarray(resets, np.bool_)
        entries.append((LOCAL_MATRIX, _mapping.Schema(False, np.dtype(np.float64), 16, "matrix"),
                        xform_rows, kstage.Write(m, semantic="matrix")))
        entries.append((RESET_XFORM_STACK, _mapping.Schema(False, np.dtype(np.bool_), 1, "none"),
                        xform_rows, kstage.Write(r)))
        for key in ((LOCAL_MATRIX, "matrix4d"), (RESET_XFORM_STACK, "bool")):
            report.columns[key] = len(xform_rows)
            report.values += len(xform_rows)
    _check_refusals(pop, entries, ordinal)
    groups: dict = {}
    for name, _, rows, spec in entries:
        groups.setdefault(tuple(rows), {})[name] = spec
    ops = []
    for rows, batch in groups.items():
        q = pop.query if len(rows) == len(pop.paths) else stage.query(pop.ids[list(rows)])
        try:
            ops.append(stage.write_batch(q, ordinal, batch))
        except kstage.Error as e:
            prim, name = describe_kstage_error(e, pop.paths, batch)
            raise UsdError(pop.source, prim, name, str(e)) from e
    for op in ops:
        op.wait()


def _check_refusals(pop, entries, ordinal):
    """Raises UsdError for what the stage would refuse, before anything is written: a name whose
    write floor is at or above `ordinal`, or a prim that holds a name in another schema."""
    stage = pop.stage
    known = {a["name"] for a in stage.attributes()}
    for name, want, rows, _ in entries:
        if name not in known:
            continue
        floor = stage.write_floor(name)
        if ordinal <= floor:
            raise UsdError(pop.source, None, name, f"ordinal {ordinal} is not above the stage's "
                           f"write floor {floor} of this attribute")
        with stage.read(stage.query(pop.ids[rows]), [name]) as read:
            for g in read:
                have = _mapping.Schema(g.is_array, np.dtype(g.dtype), g.lanes, g.semantic)
                if have != want and len(g):
                    raise UsdError(pop.source, g.paths[0], name, f"the stage holds it as "
                                   f"{_describe(have)}, the scene as {_describe(want)}")


def _describe(schema: _mapping.Schema) -> str:
    kind = "array" if schema.is_array else "fixed"
    return f"{kind} {schema.dtype.name} x {schema.lanes} ({schema.semantic})"


def populate(stage, source, ordinal: int, *, time=None, root: str = "/",
             instance_proxies: bool = True) -> Population:
    """Populates `stage` from a USD scene at `ordinal` (the caller seals it).

    source: a file path, usda text (starting with "#usda"), an Sdf.Layer or a Usd.Stage.
    time: the time code to sample (None: default values; a number or a Usd.TimeCode).
    root: only the prims at or below this path. instance_proxies: traverse into instances.

    Every composed prim becomes a prim at its path holding its type (usd-prim-type, a token; 0
    for a typeless prim) and its applied schemas (usd-schemas); every authored attribute with a
    value becomes a column by docs/usd.md's mapping; relationships become relationship_path_id
    arrays and connections "<attribute>.connect" connection_path_id arrays; every Xformable gets
    its composed local transform (omni:xform) and resetXformStack flag. What has no mapping is
    listed in the returned Population's report, never dropped silently. A refusal raises
    UsdError (naming the file, prim and attribute) with the stage unchanged: a file usd-core
    cannot open, values that do not convert, a prim that holds a name in another schema, an
    ordinal at or below a name's write floor are all found before the first write. (Only a
    failure kstage cannot foresee -- out of memory -- can leave earlier columns pending at
    `ordinal`.)
    """
    pxr = _pxr()
    Usd, UsdGeom = pxr.Usd, pxr.UsdGeom
    usd_stage, label = open_usd(source)
    code = Usd.TimeCode.Default() if time is None else Usd.TimeCode(time)
    pop = Population(stage, usd_stage, label, ordinal, code)
    report = pop.report
    start = usd_stage.GetPrimAtPath(root)
    if not start:
        raise UsdError(label, root, None, "no prim at the root path")
    predicate = (Usd.TraverseInstanceProxies(Usd.PrimDefaultPredicate) if instance_proxies
                 else Usd.PrimDefaultPredicate)
    prims = Usd.PrimRange(start, predicate)
    if start.IsPseudoRoot():
        prims = iter(prims)
        next(prims)  # the pseudo-root is not a prim
    connections, may_vary = _layer_features(usd_stage)
    columns: dict = {}
    types: dict = {}  # Sdf.ValueTypeName -> (its text, its mapping): one str() per type
    prim_types, schema_rows, schema_values = [], [], []
    xform_rows, mats, resets = [], [], []
    xformable_type = UsdGeom.Xformable
    attribute_query = Usd.AttributeQuery
    paths = pop.paths
    unmapped = report.unmapped
    for prim in prims:
        row = len(paths)
        path = prim.GetPath().pathString
        paths.append(path)
        prim_types.append(prim.GetTypeName())
        applied = prim.GetAppliedSchemas()
        if applied:
            schema_rows.append(row)
            schema_values.append(list(applied))
        for attr in prim.GetAuthoredAttributes():
            name = attr.GetName()
            value_type = attr.GetTypeName()
            found = types.get(value_type)
            if found is None:
                type_name = str(value_type)
                found = types[value_type] = (type_name, _mapping.usd_type(type_name))
            type_name, mapped = found
            if connections and attr.HasAuthoredConnections():
                key = (name + _mapping.CONNECT_SUFFIX, "connection")
                col = columns.get(key)
                if col is None:
                    col = columns[key] = _Column(key[0], _CONNECTION_TYPE)
                col.rows.append(row)
                col.values.append(attr.GetConnections())
            if mapped is None:
                unmapped.append(Unmapped(path, name, type_name, _mapping.UNMAPPED_REASON.get(
                    type_name, "no kstage schema for this USD type")))
                continue
            # Where values may vary: one value resolution for the value and its time
            # variability (a re-sample keeps asking it).
            query = attribute_query(attr) if may_vary else attr
            value = query.Get(code)
            if value is None:
                unmapped.append(Unmapped(path, name, type_name, "no value at this time" + (
                    " (its connections are kept, its type is not)"
                    if connections and attr.HasAuthoredConnections() else "")))
                continue
            key = (name, type_name)
            col = columns.get(key)
            if col is None:
                col = columns[key] = _Column(name, mapped)
            col.rows.append(row)
            col.values.append(value)
            if may_vary and query.ValueMightBeTimeVarying():
                var = pop._varying.get(key)
                if var is None:
                    var = pop._varying[key] = _Column(name, mapped)
                var.rows.append(row)
                var.attrs.append(query)
        for rel in prim.GetAuthoredRelationships():
            key = (rel.GetName(), "relationship")
            col = columns.get(key)
            if col is None:
                col = columns[key] = _Column(key[0], _RELATIONSHIP_TYPE)
            col.rows.append(row)
            col.values.append(rel.GetTargets())
        if prim.IsA(xformable_type):
            xf = xformable_type(prim)
            xform_rows.append(row)
            mats.append(xf.GetLocalTransformation(code))
            resets.append(xf.GetResetXformStack())
            if may_vary and xf.TransformMightBeTimeVarying():
                pop._varying_xforms.append((row, xf))
    report.prims = len(paths)
    report.time_varying = len(pop._varying_xforms) + sum(len(c.rows) for c in pop._varying.values())
    if not paths:
        return pop
    pop.ids = np.asarray(stage.intern(paths), np.uint64).reshape(-1)
    pop.query = stage.query(pop.ids)
    tokens = _Tokens(stage)
    special = []
    # The prim types: every prim holds one (0 for a typeless prim), so every prim exists.
    col = _Column(PRIM_TYPE, _mapping.usd_type("token"))
    col.rows, col.values = list(range(len(paths))), prim_types
    special.append(col)
    if schema_rows:
        col = _Column(APPLIED_SCHEMAS, _mapping.usd_type("token[]"))
        col.rows, col.values = schema_rows, schema_values
        special.append(col)
    for col in list(columns.values()):
        if col.usd is _RELATIONSHIP_TYPE:
            col.values = [tokens.paths(v) for v in col.values]
        elif col.usd is _CONNECTION_TYPE:
            col.values = [_connection_words(v, tokens) for v in col.values]
    _write_all(pop, pxr, special + list(columns.values()), xform_rows, mats, resets, ordinal,
               report)
    report.values -= len(paths)  # the prim types are not the scene's values
    del report.columns[(PRIM_TYPE, "token")]
    return pop


def _layer_features(usd_stage) -> tuple[bool, bool]:
    """(connections, may_vary): whether any layer the scene composes authors an attribute
    connection, and whether any authors what makes a value vary in time (time samples, a
    spline, value clips).

    A layer holds far fewer specs than the scene has composed attributes (a referenced asset's
    specs serve every instance of it), so one look at each spec saves asking every composed
    attribute (HasAuthoredConnections, ValueMightBeTimeVarying); where a layer does author them,
    every attribute is asked."""
    from pxr import Sdf
    connections = may_vary = False
    for layer in usd_stage.GetUsedLayers():
        if not may_vary and layer.ListAllTimeSamples():
            may_vary = True

        def visit(path, layer=layer):
            nonlocal connections, may_vary
            if path.IsPropertyPath():
                spec = layer.GetAttributeAtPath(path)
                if spec:
                    connections = connections or spec.HasInfo("connectionPaths")
                    may_vary = may_vary or spec.HasInfo("spline")
            elif path.IsPrimPath() and not may_vary:
                spec = layer.GetPrimAtPath(path)
                may_vary = bool(spec) and (spec.HasInfo("clips") or spec.HasInfo("clipSets"))
        layer.Traverse(Sdf.Path.absoluteRootPath, visit)
        if connections and may_vary:
            break
    return connections, may_vary


def _connection_words(targets, tokens) -> np.ndarray:
    prim_ids = tokens.paths([t.GetPrimPath() for t in targets])
    names = [tokens.token(t.name) for t in targets]
    return np.stack([prim_ids, np.asarray(names, np.uint64)], axis=1).reshape(-1, 2)


# The relationship and connection columns convert in populate (path interning), then write as
# plain uint64 arrays.
_RELATIONSHIP_TYPE = _mapping.UsdType("relationship", _mapping.NUMERIC, _mapping.RELATIONSHIP, ())
_CONNECTION_TYPE = _mapping.UsdType("connection", _mapping.NUMERIC, _mapping.CONNECTION, (2,))
