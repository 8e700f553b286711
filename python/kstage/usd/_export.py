# SPDX-License-Identifier: Apache-2.0
"""Stage -> USD: the sealed state, or a change range, as a USD layer that every USD reader opens.

Each column is read once (a zero-copy read; numpy puts the rows in prim order), converted to USD
values in bulk (numpy -> Vt arrays, whose elements are the Gf values), and authored with Sdf's layer API
inside one Sdf.ChangeBlock -- what a code writing the same values with usd-core directly does.
Values become defaults, or time samples at a time code the caller maps from ordinals, so a run of
ticks written to one LayerWriter is an animated layer.
"""
from __future__ import annotations

import dataclasses
import os

import numpy as np

from . import _mapping
from ._errors import UsdError
from ._populate import APPLIED_SCHEMAS, LOCAL_MATRIX, PRIM_TYPE, RESET_XFORM_STACK, _pxr

WORLD_MATRIX = "omni:fabric:worldMatrix"
_LATEST = (1 << 63) - 1
# A path-id column with no USD value type: a relationship of one target.
_PATH_ID = _mapping.Schema(False, np.dtype(np.uint64), 1, "path_id")
_PATH_IDS = _mapping.Schema(True, np.dtype(np.uint64), 1, "path_id")


@dataclasses.dataclass
class ExportReport:
    """What one LayerWriter.write authored, and what it left out (with the reason)."""

    prims: int = 0
    values: int = 0        # attribute values and relationships authored
    transforms: int = 0    # prims whose omni:xform became xformOp:transform
    deleted: int = 0       # tombstones in the change range (not authored: see docs/usd.md)
    skipped: list = dataclasses.field(default_factory=list)  # (attribute, schema, reason)


class LayerWriter:
    """Writes a stage's state into one USD layer, once or tick after tick.

    layer: None (a new anonymous usda layer), a file path (created, or opened and added to), or
    an Sdf.Layer. over=True authors ``over`` specs, to be composed over the source scene (a
    sublayer above it); over=False a standalone layer of ``def`` specs that carry the prims'
    types (usd-prim-type) and applied schemas (usd-schemas). population: the Population the stage
    was filled from, if any: an ``over`` layer then authors the prims the scene lacks (clones,
    new prims) as ``def``s with their types and schemas, and xform_since defaults to its
    ordinal. xform_since: the ordinal after which
    a prim's omni:xform counts as moved (Population.ordinal for a populated stage); a moved prim's
    transform is authored as ``xformOp:transform`` with ``xformOpOrder = [xformOp:transform]``
    (``!resetXformStack!`` first when its flag is set); None: every omni:xform row.
    """

    def __init__(self, stage, layer=None, *, over: bool = True, xform_since: int | None = None,
                 population=None):
        pxr = _pxr()
        Sdf = pxr.Sdf
        if population is not None and xform_since is None:
            xform_since = population.ordinal
        self.stage, self.over, self.xform_since = stage, over, xform_since
        # The scene's prims, where the stage was populated from one: an `over` layer authors the
        # prims the scene lacks (made since: clones, new prims) as `def`s with their types.
        self._source = set(population.paths) if population is not None else None
        if layer is None:
            layer = Sdf.Layer.CreateAnonymous(".usda")
        elif not isinstance(layer, Sdf.Layer):
            path = os.fspath(layer)
            layer = Sdf.Layer.FindOrOpen(path) if os.path.exists(path) else Sdf.Layer.CreateNew(path)
            if layer is None:
                raise UsdError(path, None, None, "usd-core cannot create or open this layer")
        self.layer = layer
        # A layer that held nothing at the start needs no look for existing specs (a look costs
        # as much as making the spec).
        self._fresh = layer.empty
        self._pxr = pxr
        self._specs: dict = {}     # prim path -> Sdf.PrimSpec
        self._attrs: dict = {}     # (prim path, name) -> Sdf.AttributeSpec
        self._token_names: dict = {0: ""}
        self._path_names: dict = {}

    # -- ids -> text ------------------------------------------------------------------------------
    def _token(self, t: int) -> str:
        s = self._token_names.get(t)
        if s is None:
            s = self._token_names[t] = self.stage.token_name(t)
        return s

    def _path(self, p: int) -> str:
        s = self._path_names.get(p)
        if s is None:
            s = self._path_names[p] = self.stage.path(p)
        return s

    # -- specs ------------------------------------------------------------------------------------
    def _prim(self, path: str):
        spec = self._specs.get(path)
        if spec is None:
            Sdf = self._pxr.Sdf
            spec = Sdf.CreatePrimInLayer(self.layer, path)  # the existing spec, if any
            if not self.over or self._is_new(path):
                # A def (and defs up to the scene's prims): an over of nothing is not defined.
                s = spec
                while (s and s.specifier != Sdf.SpecifierDef and s.path != Sdf.Path.absoluteRootPath
                       and (not self.over or self._is_new(s.path.pathString))):
                    s.specifier = Sdf.SpecifierDef
                    s = s.nameParent
            self._specs[path] = spec
        return spec

    def _is_new(self, path: str) -> bool:
        """A prim the populated scene did not have (only known where a population is given)."""
        return self._source is not None and path not in self._source

    def _attr(self, path: str, name: str, type_name):
        key = (path, name)
        spec = self._attrs.get(key)
        if spec is None:
            prim = self._prim(path)
            spec = None if self._fresh else self.layer.GetAttributeAtPath(
                prim.path.AppendProperty(name))
            if spec is None:
                spec = self._pxr.Sdf.AttributeSpec(prim, name, type_name)
            self._attrs[key] = spec
        return spec

    def _set(self, spec, value, time):
        if time is None:
            spec.default = value
        else:
            self.layer.SetTimeSample(spec.path, time, value)

    # -- values -----------------------------------------------------------------------------------
    def _values(self, t: _mapping.UsdType, data):
        """USD values of one group: a list, one per prim."""
        Sdf, Vt = self._pxr.Sdf, self._pxr.Vt
        fam, schema = t.family, t.schema
        if schema.is_array:
            if fam == _mapping.STRING:
                return [bytes(np.asarray(a)).decode("utf-8") for a in data]
            if fam == _mapping.NUMERIC:
                cls = Sdf.ValueTypeNames.Find(t.name).type.pythonClass
                return [cls.FromNumpy(np.ascontiguousarray(a).reshape((-1,) + t.shape))
                        for a in data]
            return [self._scalars(fam, np.asarray(a), Vt, Sdf, array=True) for a in data]
        if fam == _mapping.NUMERIC and t.shape != ():
            cls = Sdf.ValueTypeNames.Find(t.name + "[]").type.pythonClass
            return list(cls.FromNumpy(np.ascontiguousarray(data).reshape((-1,) + t.shape)))
        return self._scalars(fam, data, Vt, Sdf, array=False)

    def _scalars(self, fam, a, Vt, Sdf, array):
        if fam == _mapping.NUMERIC:
            out = a.tolist()
        elif fam == _mapping.TOKEN:
            out = [self._token(t) for t in a.tolist()]
            return Vt.TokenArray(out) if array else out
        elif fam == _mapping.PATH_EXPRESSION:
            out = [Sdf.PathExpression(self._token(t)) for t in a.tolist()]
        elif fam == _mapping.ASSET:
            out = [Sdf.AssetPath(self._token(w[0])) for w in a.reshape(-1, 2).tolist()]
        elif fam == _mapping.TIME_CODE:
            out = [Sdf.TimeCode(v) for v in a.tolist()]
        else:
            raise AssertionError(fam)
        if array:
            return Sdf.ValueTypeNames.Find(_ARRAY_OF[fam]).type.pythonClass(out)
        return out

    # -- the write --------------------------------------------------------------------------------
    def write(self, *, time=None, since: int | None = None, query=None) -> ExportReport:
        """Authors the stage's sealed state (since=None) or what changed at sealed ordinals after
        `since`, for the query's prims (None: every existing prim); as defaults (time=None) or as
        time samples at `time`. Returns what was authored and what was left out."""
        pxr = self._pxr
        Sdf = pxr.Sdf
        stage = self.stage
        report = ExportReport()
        q = stage.query() if query is None else query
        rng = None if since is None else (since + 1, _LATEST)
        names = [a["name"] for a in stage.attributes()]
        # Connections after every value: a connection is authored on its attribute's spec.
        names.sort(key=lambda n: n.endswith(_mapping.CONNECT_SUFFIX))
        moved = self._moved(q, names, rng)
        prims_seen = set()
        with Sdf.ChangeBlock():
            for name in names:
                if name in (LOCAL_MATRIX, RESET_XFORM_STACK):
                    continue
                if name == WORLD_MATRIX:
                    report.skipped.append((name, "float64 x 16", "derived: the world transforms "
                                           "USD computes from the local ones"))
                    continue
                with stage.read(q, [name], range=rng) as read:
                    for g in read:
                        if g.is_tombstone:
                            report.deleted += len(g)
                            continue
                        self._write_group(g, name, time, moved, report, prims_seen)
            if moved:
                self._write_transforms(moved, RESET_XFORM_STACK in names, time, report,
                                       prims_seen)
        report.prims = len(prims_seen)
        return report

    def _moved(self, q, names, rng):
        """prim id -> local matrix (16 floats) of the prims whose transform is authored."""
        if LOCAL_MATRIX not in names:
            return {}
        since = self.xform_since
        begin = None if since is None else since + 1
        if rng is not None:
            begin = rng[0] if begin is None else max(begin, rng[0])
        moved = {}
        with self.stage.read(q, [LOCAL_MATRIX],
                             range=None if begin is None else (begin, _LATEST)) as read:
            for g in read:
                if g.is_tombstone or g.is_array or g.lanes != 16:
                    continue
                m = _rows(g).reshape(-1, 16)
                for pid, row in zip(g.prims.tolist(), m):
                    moved[pid] = row
        return moved

    def _write_transforms(self, moved, has_resets, time, report, prims_seen):
        Sdf, Vt = self._pxr.Sdf, self._pxr.Vt
        resets = {}
        if has_resets:
            with self.stage.read(self.stage.query(list(moved)), [RESET_XFORM_STACK]) as read:
                for g in read:
                    if not g.is_array and g.lanes == 1:
                        for pid, r in zip(g.prims.tolist(), _rows(g).tolist()):
                            resets[pid] = bool(r)
        ids = list(moved)
        mats = Vt.Matrix4dArray.FromNumpy(np.stack([moved[i] for i in ids]).reshape(-1, 4, 4))
        op_order = Vt.TokenArray(["xformOp:transform"])
        reset_order = Vt.TokenArray(["!resetXformStack!", "xformOp:transform"])
        for pid, m in zip(ids, mats):
            path = self._path(pid)
            spec = self._attr(path, "xformOp:transform", Sdf.ValueTypeNames.Matrix4d)
            self._set(spec, m, time)
            order = self._attr(path, "xformOpOrder", Sdf.ValueTypeNames.TokenArray)
            order.default = reset_order if resets.get(pid) else op_order  # uniform: no samples
            prims_seen.add(pid)
        report.transforms += len(ids)

    def _write_group(self, g, name, time, moved, report, prims_seen):
        Sdf = self._pxr.Sdf
        schema = _mapping.Schema(g.is_array, np.dtype(g.dtype), g.lanes, g.semantic)
        prim_ids = g.prims.tolist()
        paths = [self._path(p) for p in prim_ids]
        if name == PRIM_TYPE or name == APPLIED_SCHEMAS:
            if not self.over:
                self._write_prim_info(g, name, paths)
            elif self._source is not None:  # the new prims' types and schemas
                self._write_prim_info(g, name, paths, keep=[not self._is_new(p) for p in paths])
            prims_seen.update(prim_ids)
            return
        if schema in (_mapping.RELATIONSHIP, _PATH_ID, _PATH_IDS):
            for path, a in zip(paths, self._rows(g)):
                prim = self._prim(path)
                rel = (prim.relationships[name] if name in prim.relationships
                       else Sdf.RelationshipSpec(prim, name))
                rel.targetPathList.explicitItems = [self._path(int(p)) for p in np.ravel(a)]
            report.values += len(paths)
            prims_seen.update(prim_ids)
            return
        if schema == _mapping.CONNECTION and name.endswith(_mapping.CONNECT_SUFFIX):
            attr_name = name[: -len(_mapping.CONNECT_SUFFIX)]
            for path, a in zip(paths, self._rows(g)):
                targets = [Sdf.Path(self._path(int(w[0]))).AppendProperty(self._token(int(w[1])))
                           for w in np.asarray(a).reshape(-1, 2)]
                prim = self._prim(path)
                spec = prim.attributes.get(attr_name) if attr_name in prim.attributes else None
                if spec is None:
                    report.skipped.append((name, "connection", f"{path}: no attribute "
                                           f"{attr_name!r} to connect"))
                    continue
                spec.connectionPathList.explicitItems = targets
            report.values += len(paths)
            prims_seen.update(prim_ids)
            return
        t = _mapping.for_schema(schema)
        if t is None:
            report.skipped.append((name, _describe(schema), "no USD type has this schema"))
            return
        if name == "xformOpOrder" and moved:
            keep = [i for i, p in enumerate(prim_ids) if p not in moved]
            if len(keep) < len(prim_ids):
                rows = self._rows(g)
                prim_ids = [prim_ids[i] for i in keep]
                paths = [paths[i] for i in keep]
                data = [rows[i] for i in keep]
                values = self._values(t, data)
                self._author(paths, name, t, values, time)
                report.values += len(paths)
                prims_seen.update(prim_ids)
                return
        values = self._values(t, self._rows(g))
        self._author(paths, name, t, values, time)
        report.values += len(paths)
        prims_seen.update(prim_ids)

    def _author(self, paths, name, t, values, time):
        type_name = self._pxr.Sdf.ValueTypeNames.Find(t.name)
        for path, v in zip(paths, values):
            self._set(self._attr(path, name, type_name), v, time)

    @staticmethod
    def _rows(g):
        """A group's rows in its prims' order: a list of arrays (array columns), or one array."""
        return _rows(g)

    def _write_prim_info(self, g, name, paths, keep=None):
        Sdf = self._pxr.Sdf
        rows = self._rows(g)
        if keep is not None:  # leave these prims' (the scene's own) info to the scene
            idx = [i for i, k in enumerate(keep) if not k]
            paths = [paths[i] for i in idx]
            rows = [rows[i] for i in idx] if isinstance(rows, list) else rows[idx]
        if name == PRIM_TYPE:
            for path, t in zip(paths, np.asarray(rows).reshape(-1).tolist()):
                type_name = self._token(t)
                if type_name:
                    self._prim(path).typeName = type_name
            return
        for path, a in zip(paths, rows):
            items = [self._token(int(t)) for t in np.ravel(a)]
            self._prim(path).SetInfo("apiSchemas", Sdf.TokenListOp.CreateExplicit(items))

    # -- particles --------------------------------------------------------------------------------
    def write_points(self, query, prim_path: str, *, positions: str, time=None,
                     widths: str | None = None, velocities: str | None = None, ids: bool = True,
                     instancer: bool = False, orientations: str | None = None,
                     prototype: str | None = None) -> int:
        """Authors the query's prims as ONE UsdGeom.Points prim (instancer=False) or
        UsdGeom.PointInstancer at `prim_path`: its arrays hold every prim's value of the named
        attributes, in query order (``ids``: the prims' path ids, int64), as defaults or time
        samples at `time`. An instancer's ``protoIndices`` are 0 and its ``prototypes``
        relationship targets `prototype`. Every prim must hold every named attribute (else
        UsdError naming the first that does not). Returns the number of points."""
        Sdf, Vt = self._pxr.Sdf, self._pxr.Vt
        names = [n for n in (positions, widths, velocities, orientations) if n]
        cols = {}
        prim_ids = None
        with self.stage.read(query, names) as read:
            for g in read:
                if g.is_tombstone or g.is_array:
                    raise UsdError(None, None, g.attribute, "points need a fixed-size column")
                if g.attribute in cols:
                    raise UsdError(None, None, g.attribute, "points need one schema per attribute")
                cols[g.attribute] = (g.prims.copy(), np.array(_rows(g)))
        for n in names:
            if n not in cols:
                raise UsdError(None, None, n, "no prim of the query holds it")
            if prim_ids is None:
                prim_ids = cols[n][0]
            elif len(cols[n][0]) != len(prim_ids) or not np.array_equal(cols[n][0], prim_ids):
                missing = np.setdiff1d(prim_ids, cols[n][0])
                where = self._path(int(missing[0])) if len(missing) else None
                raise UsdError(None, where, n, "every point must hold every named attribute")
        prim = self._prim(prim_path)
        prim.specifier = Sdf.SpecifierDef
        prim.typeName = "PointInstancer" if instancer else "Points"
        count = len(prim_ids)

        def author(attr, type_name, value):
            self._set(self._attr(prim_path, attr, type_name), value, time)

        with Sdf.ChangeBlock():
            pos = cols[positions][1].reshape(count, 3)
            point_type = Vt.Vec3dArray if pos.dtype == np.float64 else Vt.Vec3fArray
            author("positions" if instancer else "points",
                   Sdf.ValueTypeNames.Point3dArray if pos.dtype == np.float64
                   else Sdf.ValueTypeNames.Point3fArray,
                   point_type.FromNumpy(np.ascontiguousarray(pos, point_type is Vt.Vec3dArray
                                                             and np.float64 or np.float32)))
            if ids:
                author("ids", Sdf.ValueTypeNames.Int64Array,
                       Vt.Int64Array.FromNumpy(prim_ids.astype(np.int64)))
            if velocities:
                author("velocities", Sdf.ValueTypeNames.Vector3fArray,
                       Vt.Vec3fArray.FromNumpy(np.ascontiguousarray(
                           cols[velocities][1].reshape(count, 3), np.float32)))
            if widths and not instancer:
                author("widths", Sdf.ValueTypeNames.FloatArray,
                       Vt.FloatArray.FromNumpy(np.ascontiguousarray(
                           cols[widths][1].reshape(count), np.float32)))
            if instancer:
                author("protoIndices", Sdf.ValueTypeNames.IntArray,
                       Vt.IntArray.FromNumpy(np.zeros(count, np.int32)))
                if orientations:
                    author("orientations", Sdf.ValueTypeNames.QuathArray,
                           Vt.QuathArray.FromNumpy(np.ascontiguousarray(
                               cols[orientations][1].reshape(count, 4), np.float16)))
                if prototype:
                    rel = (prim.relationships["prototypes"] if "prototypes" in prim.relationships
                           else Sdf.RelationshipSpec(prim, "prototypes"))
                    rel.targetPathList.explicitItems = [prototype]
        return count

    def save(self) -> None:
        """Saves the layer (a file layer; an anonymous one has nowhere to go)."""
        if self.layer.anonymous:
            raise UsdError(self.layer.identifier, None, None, "an anonymous layer cannot be "
                           "saved: export it (layer.Export(path)) instead")
        self.layer.Save()


def _rows(g):
    """A zero-copy read group's rows in its prims' order (numpy gathers them through the group's
    index map: a compact read would run a gather kernel per column, where numpy's is cheaper for
    the sizes a USD layer holds)."""
    if g.is_array:
        return [np.from_dlpack(g.tensor(i)) for i in range(len(g))]
    data = np.from_dlpack(g.tensor(0))
    index = g.index_map
    return data if index is None else data[index]


_ARRAY_OF = {_mapping.PATH_EXPRESSION: "pathExpression[]", _mapping.ASSET: "asset[]",
             _mapping.TIME_CODE: "timecode[]", _mapping.NUMERIC: None}


def _describe(schema: _mapping.Schema) -> str:
    kind = "array" if schema.is_array else "fixed"
    return f"{kind} {schema.dtype.name} x {schema.lanes} {schema.semantic}"


def export(stage, layer=None, *, over: bool = True, time=None, since: int | None = None,
           query=None, xform_since: int | None = None, population=None):
    """Writes the stage (or the change range since `since`) into a USD layer and returns it.

    One LayerWriter(stage, layer, over=, xform_since=, population=).write(time=, since=,
    query=); a file layer is saved. See LayerWriter for the arguments."""
    w = LayerWriter(stage, layer, over=over, xform_since=xform_since, population=population)
    w.write(time=time, since=since, query=query)
    if not w.layer.anonymous:
        w.save()
    return w.layer
