# SPDX-License-Identifier: Apache-2.0
"""The type mapping between USD attribute types and kstage column schemas (docs/usd.md).

One table, read both ways: populate looks a USD value type up by its name (``point3f``,
``float3[]``), export looks a column's schema up by (kind, dtype, lanes, semantic). Each USD type
has exactly one schema and each schema at most one USD type, so a value read from USD and
written back keeps its type. Numeric types keep their bytes: a ``point3f`` is float32 x 3 with
the POINT semantic, a ``matrix4d`` float64 x 16 MATRIX (row-major, USD's own layout), a ``quatf``
float32 x 4 QUATERNION in USD's memory order (x, y, z, w: imaginary part first, real last).
"""
from __future__ import annotations

import dataclasses

import numpy as np

# Value families: how a value converts (the numeric ones through Vt arrays and numpy's buffer
# protocol, the others through the stage's token and path dictionaries).
NUMERIC = "numeric"
TOKEN = "token"
STRING = "string"
ASSET = "asset"
PATH_EXPRESSION = "pathExpression"
TIME_CODE = "timecode"


@dataclasses.dataclass(frozen=True)
class Schema:
    """A kstage column schema: what kstage_attribute_info reports for a column."""

    is_array: bool
    dtype: np.dtype
    lanes: int
    semantic: str  # kstage's lower-case semantic name ("none", "point", ...)


@dataclasses.dataclass(frozen=True)
class UsdType:
    """One USD value type (scalar or array) and the kstage schema it maps to."""

    name: str  # Sdf.ValueTypeName's text: "point3f", "float3[]"
    family: str
    schema: Schema
    shape: tuple  # one value's numpy shape: () for scalars, (3,) vectors, (4, 4) matrix4d


_TABLE: dict[str, UsdType] = {}
_BY_SCHEMA: dict[Schema, UsdType] = {}


def _add(name: str, family: str, dtype, lanes: int, semantic: str, shape: tuple) -> None:
    for array in (False, True):
        schema = Schema(array, np.dtype(dtype), lanes, semantic)
        t = UsdType(name + ("[]" if array else ""), family, schema, shape)
        _TABLE[t.name] = t
        _BY_SCHEMA[schema] = t


for _name, _dtype in (("bool", np.bool_), ("uchar", np.uint8), ("int", np.int32),
                      ("uint", np.uint32), ("int64", np.int64), ("uint64", np.uint64),
                      ("half", np.float16), ("float", np.float32), ("double", np.float64)):
    _add(_name, NUMERIC, _dtype, 1, "none", ())
for _n in (2, 3, 4):
    for _suffix, _dtype in (("i", np.int32), ("h", np.float16), ("f", np.float32),
                            ("d", np.float64)):
        _base = {"i": "int", "h": "half", "f": "float", "d": "double"}[_suffix]
        _add(f"{_base}{_n}", NUMERIC, _dtype, _n, "none", (_n,))
for _suffix, _dtype in (("h", np.float16), ("f", np.float32), ("d", np.float64)):
    _add(f"point3{_suffix}", NUMERIC, _dtype, 3, "point", (3,))
    _add(f"vector3{_suffix}", NUMERIC, _dtype, 3, "vector", (3,))
    _add(f"normal3{_suffix}", NUMERIC, _dtype, 3, "normal", (3,))
    _add(f"color3{_suffix}", NUMERIC, _dtype, 3, "color", (3,))
    _add(f"color4{_suffix}", NUMERIC, _dtype, 4, "color", (4,))
    _add(f"texCoord2{_suffix}", NUMERIC, _dtype, 2, "texcoord", (2,))
    _add(f"texCoord3{_suffix}", NUMERIC, _dtype, 3, "texcoord", (3,))
    _add(f"quat{_suffix}", NUMERIC, _dtype, 4, "quaternion", (4,))
_add("matrix2d", NUMERIC, np.float64, 4, "matrix", (2, 2))
_add("matrix3d", NUMERIC, np.float64, 9, "matrix", (3, 3))
_add("matrix4d", NUMERIC, np.float64, 16, "matrix", (4, 4))
_add("frame4d", NUMERIC, np.float64, 16, "frame", (4, 4))
_add("timecode", TIME_CODE, np.float64, 1, "time_code", ())
_add("token", TOKEN, np.uint64, 1, "token_id", ())
_add("asset", ASSET, np.uint64, 2, "asset_path_id", (2,))
_add("pathExpression", PATH_EXPRESSION, np.uint64, 1, "path_expression_id", ())
# A string is one array row of UTF-8 bytes (kstage's STRING semantic), so string[] has no schema.
_STRING = UsdType("string", STRING, Schema(True, np.dtype(np.uint8), 1, "string"), ())
_TABLE["string"] = _STRING
_BY_SCHEMA[_STRING.schema] = _STRING

# Relationships (a prim's named list of target paths) and attribute connections are not value
# types: their schemas are kstage's path semantics.
RELATIONSHIP = Schema(True, np.dtype(np.uint64), 1, "relationship_path_id")
CONNECTION = Schema(True, np.dtype(np.uint64), 2, "connection_path_id")
# A connection list is stored under "<attribute>.connect", the name usda gives it; '.' cannot
# appear in a USD property name, so it never collides with an attribute.
CONNECT_SUFFIX = ".connect"

# Why a USD type has no column (the populate report's reason).
UNMAPPED_REASON = {
    "string[]": "string[] has no kstage schema (a string is one array row of bytes)",
    "opaque": "opaque values carry no data",
    "group": "group attributes carry no data",
    "dictionary": "dictionaries have no kstage schema",
}


def usd_type(name: str) -> UsdType | None:
    """The mapping of a USD value type name ("point3f[]"), or None."""
    return _TABLE.get(name)


def for_schema(schema: Schema) -> UsdType | None:
    """The USD type a column schema exports as, or None (no USD type has that schema)."""
    return _BY_SCHEMA.get(schema)


def table() -> list[UsdType]:
    """Every mapped USD type, scalar before array (docs/usd.md prints it)."""
    return sorted(_TABLE.values(), key=lambda t: (t.name.endswith("[]"), t.name))
