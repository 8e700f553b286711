# SPDX-License-Identifier: Apache-2.0
"""The scene's hierarchy and relational filters from Python: Stage.hierarchy (kstage.Hierarchy:
parents, children and siblings with gaps in the path tree, a missing prim's item, a path range's
members as one span, deleted members splitting it, the views' lifetimes) and Stage.query_where
(every supported predicate, AND, the values' forms, and the refusals)."""
import pytest

np = pytest.importorskip("numpy", minversion="2.1")

import kstage  # noqa: E402


def make_prims(stage, paths, ordinal, seal=True):
    stage.write("mass", paths, np.ones(len(paths), np.float32), ordinal).wait()
    if seal:
        stage.seal(ordinal)


def one(stage, path, relation):
    """The paths (strings) of `path`'s one item."""
    with stage.hierarchy([path], relation) as h:
        assert h.status(0) == 0
        return h.path_strings(0)


# ---- hierarchy ---------------------------------------------------------------------------------


def test_parents_skip_paths_that_are_no_prims(stage):
    make_prims(stage, ["/a", "/a/b/c", "/x"], 1)
    assert one(stage, "/a/b/c", "parent") == ["/a"]
    assert one(stage, "/a", "parent") == []  # a root: OK, no paths
    assert one(stage, "/a", "children") == ["/a/b/c"]
    assert one(stage, "/a", "siblings") == ["/x"]  # the other roots
    assert one(stage, "/a/b/c", "siblings") == []
    # "/a/b" becomes a prim (after its seal only): the parent in between.
    make_prims(stage, ["/a/b"], 2, seal=False)
    assert one(stage, "/a/b/c", "parent") == ["/a"]
    stage.seal(2)
    assert one(stage, "/a/b/c", "parent") == ["/a/b"]
    assert one(stage, "/a", "children") == ["/a/b"]
    # Deleted again: "/a/b/c" is "/a"'s child once more.
    stage.delete(["/a/b"], 3).wait()
    stage.seal(3)
    assert one(stage, "/a/b/c", "parent") == ["/a"]


def test_one_item_per_prim_each_with_its_own_status(stage):
    make_prims(stage, ["/a", "/b", "/b/d"], 1)
    ids = stage.intern(["/b", "/ghost", "/b/d", "/a"])
    q = stage.query(ids)
    h = stage.hierarchy(q, "siblings")  # a Query, or paths
    assert isinstance(h, kstage.Hierarchy)
    assert len(h) == 4 and h.relation == "siblings"
    assert h.statuses.dtype == np.int32
    assert h.statuses.tolist() == [0, kstage.NotFound.status, 0, 0]
    assert h.status(1) == kstage.NotFound.status and h.status(-3) == h.status(1)
    assert h.spans_of(1).shape == (0, 2) and h.paths(1).size == 0  # the missing prim: nothing
    assert h.path_strings(0) == ["/a"] and h.path_strings(3) == ["/b"]
    assert h.paths(2).tolist() == []  # "/b/d" has no siblings
    assert h.path_counts.tolist() == [1, 0, 0, 1]
    assert h.span_offsets.tolist() == [0, 1, 1, 1, 2]
    assert h.spans.tolist() == [[ids[3], 1], [ids[0], 1]]
    with pytest.raises(IndexError):
        h.status(4)
    with pytest.raises(IndexError):
        h.paths(-5)
    # The same with paths (strings or ids) instead of a query.
    assert stage.hierarchy(["/b/d"], "parent").paths(0).tolist() == [ids[0]]
    assert stage.hierarchy(ids[2:3], "parent").paths(0).tolist() == [ids[0]]


def test_a_path_range_is_one_span_and_deletes_split_it(stage):
    n = 1000
    make_prims(stage, ["/World"], 1)
    first = stage.intern_range("/World/envs", "env_", 0, n)
    make_prims(stage, ["/World/ground"], 2)
    ground = stage.intern("/World/ground")
    stage.write("mass", stage.query_range(first), np.ones(n, np.float32), 3).wait()
    stage.seal(3)

    with stage.hierarchy(["/World"], "children") as h:
        assert h.spans.dtype == np.uint64 and h.spans.shape == (2, 2)
        assert h.spans.tolist() == [[first, n], [ground, 1]]
        assert h.path_counts.tolist() == [n + 1]
        paths = h.paths(0)
        assert paths.dtype == np.uint64
        assert paths.tolist() == list(range(first, first + n)) + [ground]
        # Spans expand with numpy alone.
        s = h.spans_of(0)
        expanded = np.concatenate([np.arange(f, f + c, dtype=np.uint64) for f, c in s])
        np.testing.assert_array_equal(expanded, paths)

    # Every member's parent at once: one item (one span) each.
    with stage.hierarchy(stage.query_range(first), "parent") as h:
        assert len(h) == n and h.spans.shape == (n, 2)
        assert (h.spans[:, 0] == stage.intern("/World")).all()
        np.testing.assert_array_equal(h.span_offsets, np.arange(n + 1, dtype=np.uint64))

    assert one(stage, stage.path(first + 17), "siblings")[:2] == ["/World/envs/env_0",
                                                                   "/World/envs/env_1"]
    with stage.hierarchy([first + 17], "siblings") as h:
        assert h.spans.tolist() == [[first, 17], [first + 18, n - 18], [ground, 1]]

    # Deleted members split the span.
    stage.delete([first + 10, first + 500], 4).wait()
    stage.seal(4)
    with stage.hierarchy([stage.intern("/World"), first + 10], "children") as h:
        assert h.spans_of(0).tolist() == [[first, 10], [first + 11, 489], [first + 501, n - 501],
                                          [ground, 1]]
        assert h.statuses.tolist() == [0, kstage.NotFound.status]
        assert h.path_counts[0] == n - 1


def test_views_are_read_only_and_outlive_the_answer(stage):
    make_prims(stage, ["/a", "/a/b", "/a/c"], 1)
    h = stage.hierarchy(["/a", "/a/b"], "children")
    spans, statuses, offsets = h.spans, h.statuses, h.span_offsets
    for view in (spans, statuses, offsets, h.path_counts, h.spans_of(0)):
        assert not view.flags.writeable
        with pytest.raises(ValueError):
            view[...] = 0
    assert h.handle != 0 and not h.released
    h.release()
    h.release()  # idempotent
    assert h.released and h.handle == 0
    with pytest.raises(kstage.InvalidHandle):
        len(h)
    with pytest.raises(kstage.InvalidHandle):
        h.spans
    # The views keep the answer (explicit paths are spans of one, even when consecutive).
    assert spans.tolist() == [[stage.intern("/a/b"), 1], [stage.intern("/a/c"), 1]]
    assert "released" in repr(h)
    # The stage closed while a view lives: the view stays valid, the answer is stale.
    h2 = stage.hierarchy(["/a/b"], "siblings")
    view = h2.spans
    stage.close()
    with pytest.raises(kstage.InvalidHandle):
        h2.paths(0)
    assert view.shape == (1, 2) and view[0, 1] == 1  # "/a/c", still readable
    del view, spans, statuses, offsets  # the last view lets the stage go


def test_empty_query_and_bad_relation(stage):
    make_prims(stage, ["/a"], 1)
    h = stage.hierarchy([], "children")
    assert len(h) == 0 and h.spans.shape == (0, 2) and h.statuses.shape == (0,)
    assert h.span_offsets.tolist() == [0]
    for bad in ("child", "PARENT", ""):
        with pytest.raises(kstage.InvalidArgument, match="parent.*children.*siblings"):
            stage.hierarchy(["/a"], bad)
    with pytest.raises(ValueError):
        stage.hierarchy(["/a"], "ancestors")
    with pytest.raises(TypeError):
        stage.hierarchy(["/a"], 1)


# ---- filters -----------------------------------------------------------------------------------


@pytest.fixture
def scene(stage):
    """/World (Xform) with /World/a (Cube; RigidBody, Collision), /World/b (Cube; RigidBody),
    /World/a/c (Sphere; no schemas), and /Other (no type); "mass" on /World/a and /Other."""
    t = stage.token
    stage.write(kstage.PRIM_TYPE, ["/World", "/World/a", "/World/b", "/World/a/c"],
                np.array([t("Xform"), t("Cube"), t("Cube"), t("Sphere")], np.uint64), 1,
                semantic="token_id").wait()
    rigid, collision = t("PhysicsRigidBodyAPI"), t("PhysicsCollisionAPI")
    stage.write(kstage.APPLIED_SCHEMAS, ["/World/a", "/World/b", "/World/a/c"],
                [np.array([rigid, collision], np.uint64), np.array([rigid], np.uint64),
                 np.zeros(0, np.uint64)], 1, semantic="token_id").wait()
    stage.write("mass", ["/World/a", "/Other"], np.array([1, 2], np.float32), 1).wait()
    stage.seal(1)
    stage.intern("/World/ghost")  # interned, never a prim
    return stage


def where(stage, *predicates):
    with stage.query_where(list(predicates)) as q:
        return [stage.path(p) for p in q.paths]


ALL = ["/World", "/World/a", "/World/b", "/World/a/c", "/Other"]


def test_every_supported_predicate(scene):
    s = scene
    assert where(s) == ALL  # no predicate: every existing prim
    assert s.query_where().paths.size == 5
    # has: any attribute; the hierarchy's names: every prim, non-roots, prims with children.
    assert where(s, ("has", "mass")) == ["/World/a", "/Other"]
    assert where(s, ("has", s.token("mass"))) == ["/World/a", "/Other"]  # a token
    assert where(s, ("has", kstage.APPLIED_SCHEMAS)) == ["/World/a", "/World/b", "/World/a/c"]
    assert where(s, ("has", kstage.PATH_ATTRIBUTE)) == ALL
    assert where(s, ("has", kstage.PARENT_ATTRIBUTE, None)) == ["/World/a", "/World/b",
                                                                "/World/a/c"]
    assert where(s, ("has", kstage.CHILDREN_ATTRIBUTE)) == ["/World", "/World/a"]
    assert where(s, ("has", "never-written")) == []
    # usd-path in / prefix: paths as str, a list of str, ids, an id array.
    assert where(s, ("in", kstage.PATH_ATTRIBUTE, ["/World/a/c", "/World/ghost", "/World/a"])) == [
        "/World/a", "/World/a/c"]
    assert where(s, ("in", kstage.PATH_ATTRIBUTE, s.intern(["/Other"]))) == ["/Other"]
    assert where(s, ("in", kstage.PATH_ATTRIBUTE, s.intern("/Other"))) == ["/Other"]
    assert where(s, ("prefix", kstage.PATH_ATTRIBUTE, "/World/a")) == ["/World/a", "/World/a/c"]
    assert where(s, ("prefix", kstage.PATH_ATTRIBUTE, ["/World"])) == ALL[:4]
    # usd-parent in: the children of those prims.
    assert where(s, ("in", kstage.PARENT_ATTRIBUTE, "/World")) == ["/World/a", "/World/b"]
    assert where(s, ("in", kstage.PARENT_ATTRIBUTE, ["/World/a", "/World"])) == ALL[1:4]
    # usd-children contains: the parent of every one.
    assert where(s, ("contains", kstage.CHILDREN_ATTRIBUTE, ["/World/a", "/World/b"])) == ["/World"]
    assert where(s, ("contains", kstage.CHILDREN_ATTRIBUTE, "/World/a/c")) == ["/World/a"]
    assert where(s, ("contains", kstage.CHILDREN_ATTRIBUTE, ["/World/a", "/World/a/c"])) == []
    # usd-prim-type in: token names (interned) or ids.
    assert where(s, ("in", kstage.PRIM_TYPE, "Cube")) == ["/World/a", "/World/b"]
    assert where(s, ("in", kstage.PRIM_TYPE, ["Sphere", s.token("Xform")])) == ["/World",
                                                                                "/World/a/c"]
    assert where(s, ("in", kstage.PRIM_TYPE, np.array([s.token("Sphere")], np.uint64))) == [
        "/World/a/c"]
    assert where(s, ("in", kstage.PRIM_TYPE, ["PhysicsRigidBodyAPI"])) == []
    # usd-schemas contains: every one applied.
    assert where(s, ("contains", kstage.APPLIED_SCHEMAS, "PhysicsRigidBodyAPI")) == ["/World/a",
                                                                                    "/World/b"]
    assert where(s, ("contains", kstage.APPLIED_SCHEMAS,
                     ["PhysicsCollisionAPI", "PhysicsRigidBodyAPI"])) == ["/World/a"]
    assert where(s, ("contains", kstage.APPLIED_SCHEMAS, ["Cube"])) == []


def test_predicates_combine_as_and(scene):
    s = scene
    assert where(s, ("in", kstage.PRIM_TYPE, ["Cube"]),
                 ("contains", kstage.APPLIED_SCHEMAS, ["PhysicsCollisionAPI"])) == ["/World/a"]
    assert where(s, ("in", kstage.PARENT_ATTRIBUTE, ["/World"]), ("has", "mass")) == ["/World/a"]
    assert where(s, ("prefix", kstage.PATH_ATTRIBUTE, "/World"),
                 ("has", kstage.CHILDREN_ATTRIBUTE),
                 ("in", kstage.PRIM_TYPE, ["Cube", "Xform"])) == ["/World", "/World/a"]
    # Tuples or lists, and the answer is a kstage.Query like any other.
    q = s.query_where((["in", kstage.PARENT_ATTRIBUTE, ["/World"]],))
    assert isinstance(q, kstage.Query) and len(q) == 2
    h = s.hierarchy(q, "parent")
    assert [h.path_strings(i) for i in range(len(h))] == [["/World"], ["/World"]]


def test_unsupported_and_malformed_predicates(scene):
    s = scene
    # The reserved comparisons, and 'in' on an ordinary attribute: NotSupported, a
    # NotImplementedError, naming the predicate.
    for op in ("lt", "le", "gt", "ge"):
        with pytest.raises(kstage.NotSupported, match=r"predicates\[1\]"):
            s.query_where([("has", "mass"), (op, "mass", 1.5)])
    with pytest.raises(NotImplementedError, match="reserved"):
        s.query_where([("lt", kstage.PATH_ATTRIBUTE, "/World")])
    with pytest.raises(kstage.NotSupported, match="IN on 'mass'"):
        s.query_where([("in", "mass", [1])])
    with pytest.raises(kstage.NotSupported, match=r"PREFIX on 'usd-parent'"):
        s.query_where([("prefix", kstage.PARENT_ATTRIBUTE, "/World")])
    with pytest.raises(kstage.NotSupported):
        s.query_where([("contains", kstage.PRIM_TYPE, ["Cube"])])
    # Malformed: InvalidArgument (a ValueError).
    with pytest.raises(kstage.InvalidArgument, match="HAS takes no values"):
        s.query_where([("has", "mass", [1])])
    with pytest.raises(kstage.InvalidArgument, match="exactly one path"):
        s.query_where([("prefix", kstage.PATH_ATTRIBUTE, ["/World", "/Other"])])
    with pytest.raises(kstage.InvalidArgument, match="at least one"):
        s.query_where([("in", kstage.PARENT_ATTRIBUTE, [])])
    with pytest.raises(kstage.InvalidArgument, match="not a path"):
        s.query_where([("in", kstage.PATH_ATTRIBUTE, [2**40])])
    with pytest.raises(kstage.InvalidArgument, match="not a token"):
        s.query_where([("in", kstage.PRIM_TYPE, [2**40])])
    with pytest.raises(kstage.InvalidArgument, match=r"predicates\[0\].*'equals'"):
        s.query_where([("equals", "mass", [1])])
    with pytest.raises(ValueError, match="not a str"):
        s.query_where("has")
    with pytest.raises(TypeError, match=r"predicates\[0\]"):
        s.query_where([("has",)])
    with pytest.raises(TypeError):
        s.query_where(5)
