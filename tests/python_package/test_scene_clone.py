# SPDX-License-Identifier: Apache-2.0
"""Clone from Python (Stage.clone, Stage.clone_range; kstage_clone, kstage_clone_range): a
subtree copied to listed targets (paths, ids, a numpy array, a Python range of ids) and to the
members of a path range, seen once sealed; path_id values rebased below the target; every
refusal raised at the call as its kstage exception, with the stage unchanged."""
import pytest

np = pytest.importorskip("numpy", minversion="2.1")

import kstage  # noqa: E402
from ks_support import values_in_prim_order  # noqa: E402

SUBTREE = ["/src", "/src/a", "/src/a/b"]


def below(target, paths=SUBTREE, source="/src"):
    """The copies of `paths` (at or below `source`) below `target`."""
    return [target + p[len(source):] for p in paths]


def by_path(stage, paths, attr):
    """{path: values} of the prims of `paths` that hold `attr` in the latest sealed state (a
    fixed-size attribute: the row; an array attribute: the row's elements)."""
    out = {}
    for g in stage.read(stage.query(paths), attr, compact=True):
        if g.is_array:
            rows = [np.from_dlpack(g.tensor(i)).copy() for i in range(g.tensor_count)]
        else:
            rows = values_in_prim_order(g)
        for p, v in zip(g.paths, rows):
            out[p] = v
    return out


@pytest.fixture
def src(stage):
    """/src, /src/a, /src/a/b hold pos (float32 x 3, rows 0..8); /src/a and /src/a/b mass
    (float64); sealed at 1."""
    pos = np.arange(9, dtype=np.float32).reshape(3, 3)
    stage.write("pos", SUBTREE, pos, 1, semantic="point")
    stage.write("mass", SUBTREE[1:], np.array([2.0, 3.0]), 1)
    stage.seal(1)
    return pos


def assert_copy(stage, target, pos, paths=SUBTREE):
    got = by_path(stage, below(target, paths), "pos")
    assert sorted(got) == sorted(below(target, paths))
    np.testing.assert_array_equal(np.stack([got[p] for p in below(target, paths)]), pos)


def test_clone_to_listed_targets(stage, src):
    op = stage.clone("/src", ["/copies/t1", "/copies/t2"], 2)
    assert isinstance(op, kstage.Op)
    op.wait()
    assert by_path(stage, below("/copies/t1"), "pos") == {}  # the caller seals the ordinal
    stage.seal(2)
    for t in ("/copies/t1", "/copies/t2"):
        assert_copy(stage, t, src)
        mass = by_path(stage, below(t), "mass")
        assert sorted(mass) == below(t, SUBTREE[1:])
        assert float(mass[t + "/a/b"]) == 3.0
    assert stage.attribute_info("pos")["prim_count"] == 9  # three copies of three prims
    assert_copy(stage, "/src", src)  # the source is as it was

    # The source as an id, the targets as a numpy array of ids (Stage.intern's result).
    ids = stage.intern(["/ids/t3", "/ids/t4"])
    stage.clone(stage.intern("/src/a"), ids, 3).wait()
    # One target as a str, and the targets as a list of ids.
    stage.clone("/src/a/b", "/one", 3).wait()
    stage.clone("/src/a/b", [int(stage.intern("/two"))], 3).wait()
    stage.seal(3)
    for t in ("/ids/t3", "/ids/t4"):
        got = by_path(stage, [t, t + "/b"], "pos")
        np.testing.assert_array_equal(got[t], src[1])
        np.testing.assert_array_equal(got[t + "/b"], src[2])
    for t in ("/one", "/two"):
        np.testing.assert_array_equal(by_path(stage, [t], "pos")[t], src[2])


def test_clone_to_range_members(stage, src):
    first = stage.intern_range("/envs", "env_", 0, 8)
    names = [stage.path(stage.range_member(first, i)) for i in range(8)]
    assert names[3] == "/envs/env_3"
    stage.clone_range("/src", first, 2, start=2, count=3).wait()
    stage.seal(2)
    for i, name in enumerate(names):
        if 2 <= i < 5:
            assert_copy(stage, name, src)
        else:
            assert by_path(stage, below(name), "pos") == {}
    # count 0: to the range's end.
    stage.clone_range("/src/a/b", first, 3, start=7).wait()
    # Members by id: a Python range of ids is a sequence of ids.
    stage.clone("/src/a/b", range(first + 5, first + 7), 3).wait()
    stage.seal(3)
    got = by_path(stage, names, "pos")
    assert sorted(got) == names[2:]
    for name in names[5:]:
        np.testing.assert_array_equal(got[name], src[2])


def test_clone_rebases_path_ids(stage):
    src_ids = stage.intern(SUBTREE + ["/other"])
    # A fixed path_id column: /src names itself, /src/a names /src/a/b (inside the subtree),
    # /src/a/b names /other (outside).
    link = np.array([src_ids[0], src_ids[2], src_ids[3]], np.uint64)
    stage.write("link", SUBTREE, link, 1, semantic="path_id")
    # An array path_id column: /src names /src/a, /other and /src/a/b.
    rel = np.array([src_ids[1], src_ids[3], src_ids[2]], np.uint64)
    stage.write("rel", ["/src"], [rel], 1, semantic="path_id")
    # A uint64 column of another semantic is copied as it is.
    stage.write("plain", ["/src/a"], np.array([src_ids[2]], np.uint64), 1)
    stage.seal(1)
    stage.clone("/src", ["/t"], 2).wait()
    stage.seal(2)
    t_ids = stage.intern(below("/t"))
    got = by_path(stage, below("/t"), "link")
    assert [int(got[p]) for p in below("/t")] == [t_ids[0], t_ids[2], src_ids[3]]
    assert by_path(stage, ["/t"], "rel")["/t"].tolist() == [t_ids[1], src_ids[3], t_ids[2]]
    assert int(by_path(stage, ["/t/a"], "plain")["/t/a"]) == src_ids[2]
    # The source's values are its own still.
    assert by_path(stage, ["/src"], "rel")["/src"].tolist() == rel.tolist()
    src_link = by_path(stage, SUBTREE, "link")
    assert [int(src_link[p]) for p in SUBTREE] == link.tolist()


def test_clone_refusals_raise_at_the_call(stage, src):
    stage.clone("/src", ["/t"], 2).wait()
    stage.seal(2)
    # ALREADY_EXISTS: a path the copy would create exists; all or nothing, so /u is not made.
    with pytest.raises(kstage.AlreadyExists, match="targets\\[1\\] '/t' already exists") as e:
        stage.clone("/src", ["/u", "/t"], 3)
    assert isinstance(e.value, ValueError)
    assert e.value.status == kstage.AlreadyExists.status
    with pytest.raises(kstage.NotFound, match="'/nothing' does not exist") as e:
        stage.clone("/nothing", ["/v"], 3)
    assert isinstance(e.value, KeyError)
    with pytest.raises(kstage.InvalidArgument, match="lies below the source"):
        stage.clone("/src", ["/src/a/inside"], 3)  # below the source
    with pytest.raises(kstage.InvalidArgument, match="both '/v'"):
        stage.clone("/src", ["/v", "/v"], 3)  # listed twice
    with pytest.raises(kstage.InvalidArgument, match="would overlap"):
        stage.clone("/src", ["/v", "/v/w"], 3)  # one below another
    with pytest.raises(kstage.InvalidArgument, match="no targets"):
        stage.clone("/src", [], 3)  # no target
    with pytest.raises(kstage.WriteFloorViolation, match="write floor 2"):
        stage.clone("/src", ["/v"], 2)
    with pytest.raises(TypeError, match="source"):
        stage.clone(1.5, ["/v"], 3)
    first = stage.intern_range("/envs", "env_", 0, 4)
    with pytest.raises(kstage.InvalidArgument, match="beyond the range"):
        stage.clone_range("/src", first, 3, start=3, count=2)  # beyond the range
    with pytest.raises(kstage.InvalidArgument, match="not the first path of a path range"):
        stage.clone_range("/src", first + 1, 3)  # not the range's first id
    # ALREADY_EXISTS: the copy of a path range inside the subtree cannot be made where the
    # target has a path named like one of its members.
    stage.write("mass", [stage.intern("/envs"), stage.range_member(first, 0)], np.ones(2), 3)
    stage.seal(3)
    stage.intern("/envs_copy/env_2")
    with pytest.raises(kstage.AlreadyExists, match="its member '/envs_copy/env_2' was interned"):
        stage.clone("/envs", ["/envs_copy"], 4)
    stage.seal(4)
    # Nothing of the refused clones was made.
    made = by_path(stage, ["/v", "/v/a", "/envs_copy"] + below("/u"), "pos")
    assert made == {}
    assert by_path(stage, ["/envs_copy"], "mass") == {}


def test_clone_copies_path_ranges_inside_the_subtree(stage):
    # /cloud holds mass, and so do members 1 and 3 of /cloud/pts/p{0..4}; member 3 names member 1.
    first = stage.intern_range("/cloud/pts", "p", 0, 5)
    m1, m3 = stage.range_member(first, 1), stage.range_member(first, 3)
    stage.write("mass", [stage.intern("/cloud"), m1, m3], np.array([1.0, 2.0, 3.0]), 1)
    stage.write("link", [m3], np.array([m1], np.uint64), 1, semantic="path_id")
    stage.seal(1)
    stage.clone("/cloud", ["/a", "/b"], 2).wait()
    stage.seal(2)
    for t in ("/a", "/b"):
        got = by_path(stage, [t, t + "/pts/p1", t + "/pts/p3"], "mass")
        assert {p: float(v) for p, v in got.items()} == {t: 1.0, t + "/pts/p1": 2.0,
                                                       t + "/pts/p3": 3.0}
        # The copies are members of a range of their own: consecutive ids, p1 + 2 = p3.
        p1, p3 = (int(i) for i in stage.intern([t + "/pts/p1", t + "/pts/p3"]))
        assert p3 == p1 + 2
        assert int(by_path(stage, [t + "/pts/p3"], "link")[t + "/pts/p3"]) == p1  # rebased
