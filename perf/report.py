#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Report of a kstage perf run: summary.md, summary.csv, PNG plots and the PASS/FAIL targets.

    report.py RESULTS_DIR

Reads RESULTS_DIR/results.csv (kstage_perf) and RESULTS_DIR/numpy.csv (numpy_baseline.py, if
present), and writes into RESULTS_DIR:
  summary.md    targets, then one table row per kstage measurement: GB/s and its ratios to
                memcpy, numpy and the plain serial loop measured in the same run
  summary.csv   the same rows as CSV
  targets.txt   the PASS/FAIL/SKIP lines (also printed at the end)
  plots/*.png   bandwidth against row count per workload (log x), one line per
                (exec, implementation); needs matplotlib (the perf venv), skipped otherwise.
Only the standard library is needed for everything but the plots.
"""
import csv
import math
import os
import statistics
import sys
from collections import defaultdict

FAMILY_ORDER = ["write", "seal", "read", "change", "ragged", "particles", "map", "dlpack", "scene"]
TARGET_ROWS = 1_000_000
MAP_TIME_ROWS = 100_000


def fnum(s):
    try:
        v = float(s)
        return v if math.isfinite(v) else 0.0
    except (TypeError, ValueError):
        return 0.0


def rows_label(n):
    n = int(n)
    e = math.log10(n) if n > 0 else 0
    if n >= 1000 and abs(e - round(e)) < 1e-9:
        return "1e%d" % round(e)
    if n >= 1000 and n % 1000 == 0:
        m = n / 10 ** int(e)
        return ("%ge%d" % (m, int(e)))
    return str(n)


def short_dtype(d):
    return {"float32": "f32", "float64": "f64"}.get(d, d)


def load(path):
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def read_meta(d):
    meta = {}
    p = os.path.join(d, "meta.txt")
    if os.path.exists(p):
        for line in open(p):
            if "=" in line:
                k, v = line.rstrip("\n").split("=", 1)
                meta[k] = v
    return meta


def ratio(s):
    v = fnum(s)
    return "%.2fx" % v if v > 0 else "-"


def median_label(r):
    med = fnum(r["median_s"])
    return "%.1f us" % (med * 1e6) if med < 1e-3 else "%.2f ms" % (med * 1e3)


def shape_key(r):
    return (r["rows"], r["lanes"], r["dtype"])


# ---- targets ----------------------------------------------------------------------------------
def note_number(row, key):
    """The number `key=value` of a row's CSV note ("k=v; k=v"), 0.0 when it has none."""
    for item in row.get("note", "").split("; "):
        k, _, val = item.partition("=")
        if k == key:
            return fnum(val)
    return 0.0


def evaluate(cases, ratio_field, threshold):
    """cases: kstage rows; returns (verdict, detail)."""
    vals = [(fnum(c[ratio_field]), c) for c in cases if fnum(c[ratio_field]) > 0]
    if not vals:
        return "n/a", "no measurement (baseline missing or filtered out)"
    return judge(vals, threshold)


def judge(vals, threshold):
    """vals: non-empty [(ratio, kstage row)]; returns (verdict, detail): PASS when every ratio
    reaches the threshold, with how many do, the median and the worst case."""
    passed = sum(1 for v, _ in vals if v >= threshold)
    worst_v, worst_c = min(vals, key=lambda x: x[0])
    med = statistics.median(v for v, _ in vals)
    verdict = "PASS" if passed == len(vals) else "FAIL"
    detail = "%d/%d cases; median %.2fx; worst %.2fx (%s %s %sx%s)" % (
        passed, len(vals), med, worst_v, worst_c["workload"], rows_label(worst_c["rows"]),
        short_dtype(worst_c["dtype"]), worst_c["lanes"])
    return verdict, detail


def targets(kst, pending=None, omp=None):
    """pending: {workload: reason} of workloads registered as not implemented in kstage yet.
    omp: {(loop key, rows, lanes, dtype): gbps} of the plain OpenMP loops measured in the run."""
    pending = pending or {}
    omp = omp or {}
    big = [r for r in kst if int(r["rows"]) >= TARGET_ROWS]
    execs = sorted({r["exec"] for r in big}) or ["serial", "parallel"]
    lines = []

    def line(verdict, what, detail):
        lines.append("%-4s  %s: %s" % (verdict, what, detail))

    def sel(names, exec_):
        return [r for r in big if r["workload"] in names and r["exec"] == exec_]

    for exec_ in execs:
        for names, label in ((["write_dense"], "write_dense = write call + kstage_wait"),
                             (["write_dense_seal"], "write_dense_seal = write + wait + seal")):
            v, d = evaluate(sel(names, exec_), "ratio_memcpy", 0.70)
            line(v, "dense write >= 0.70x memcpy, rows >= 1e6 [%s, %s]" % (label, exec_), d)
    for exec_ in execs:
        v, d = evaluate(sel(["read_latest_compact"], exec_), "ratio_memcpy", 0.70)
        line(v, "dense read >= 0.70x memcpy, rows >= 1e6 [read_latest_compact, HELD to the target, %s]" % exec_, d)
        v, d = evaluate(sel(["read_latest"], exec_), "ratio_memcpy", 0.70)
        line(v, "dense read >= 0.70x memcpy, rows >= 1e6 [read_latest zero-copy, reported only: moves no "
                "payload bytes, %s]" % exec_, d)
    sparse = ["write_index_map_random", "write_index_map_local", "write_mask_50", "write_mask_05"]
    sparse_seal = [n + "_seal" for n in sparse]
    # Issue 12 restated the numpy target: ">= 3x numpy (serial)" cannot hold where numpy's `take`
    # is within 3x of the plain loop (float32 x 1). Serial: >= 0.9x the serial loop and >= 1x
    # numpy; parallel: >= 3x numpy, as before.
    for exec_ in execs:
        for names, label in ((sparse, "write + wait"), (sparse_seal, "write + wait + seal")):
            cases = sel(names, exec_)
            if exec_ == "serial":
                v, d = evaluate(cases, "ratio_loop", 0.9)
                line(v, "index_map and mask writes >= 0.9x the serial loop, rows >= 1e6 [%s, serial]" % label, d)
                v, d = evaluate(cases, "ratio_numpy", 1.0)
                line(v, "index_map and mask writes >= 1x numpy, rows >= 1e6 [%s, serial]" % label, d)
                continue
            v, d = evaluate(cases, "ratio_numpy", 3.0)
            # Context: how far ahead of numpy the plain serial loop itself is, same run.
            lead = [fnum(c["loop_gbps"]) / fnum(c["numpy_gbps"]) for c in cases
                    if fnum(c["loop_gbps"]) > 0 and fnum(c["numpy_gbps"]) > 0]
            if lead:
                d += "; the plain serial loop reached %.2fx numpy (median; %.2f-%.2fx)" % (
                    statistics.median(lead), min(lead), max(lead))
            line(v, "index_map and mask writes >= 3x numpy, rows >= 1e6 [%s, %s]" % (label, exec_), d)
    for names, label in ((sparse, "write + wait"), (sparse_seal, "write + wait + seal")):
        cases = sel(names, "parallel")
        v, d = evaluate(cases, "ratio_loop", 1.5)
        # What 2 threads give this machine in this run: the same loop under omp parallel for.
        ceil = [omp[k] / fnum(c["loop_gbps"]) for c in cases
                for k in [(c["loop_key"], c["rows"], c["lanes"], c["dtype"])]
                if k in omp and fnum(c["loop_gbps"]) > 0]
        if ceil:
            d += "; the plain loop under OpenMP reached %.2fx the serial loop (median; %.2f-%.2fx)" % (
                statistics.median(ceil), min(ceil), max(ceil))
        line(v, "index_map and mask writes >= 1.5x the serial loop with OpenMP (2 threads), rows >= 1e6 "
                "[%s, parallel]" % label, d)
    # Issue 12: a sealed sparse write (write + wait + seal, parallel) at >= 0.7x the same loop
    # under OpenMP on the same data (the seal's second movement may cost one sequential pass);
    # a managed tensor adopted by the write needs no copy at the call: >= 0.9x.
    # Issue 32 restated the sealed local index_map write's target: isolation until the seal needs
    # a gather at the call and a scatter at the seal, which the one-pass loop does not; so it is
    # held to the two-pass floor -- the same gather + scatter as OpenMP loops on the same data,
    # same run -- at >= 0.8x, and its ratio to the one-pass loop is printed beside it.
    local_seal = ["write_index_map_local_seal"]
    title = ("sealed local index_map writes >= 0.8x the two-pass OpenMP loop (gather into a staging "
             "buffer, then scatter), rows >= 1e6 [write_index_map_local_seal, parallel]")
    vs_two, vs_one = [], []
    for c in sel(local_seal, "parallel"):
        shape = (c["rows"], c["lanes"], c["dtype"])
        two = omp.get(("gather_scatter_stride4_two_pass",) + shape, 0)
        one = omp.get((c["loop_key"],) + shape, 0)
        if two > 0 and fnum(c["gbps"]) > 0:
            vs_two.append((fnum(c["gbps"]) / two, c))
        if one > 0 and fnum(c["gbps"]) > 0:
            vs_one.append(fnum(c["gbps"]) / one)
    if not vs_two:
        line("n/a", title, "no two-pass OpenMP loop measured in this run")
    else:
        v, d = judge(vs_two, 0.8)
        if vs_one:
            d += "; %.2fx the one-pass OpenMP loop (median; %.2f-%.2fx), reported" % (
                statistics.median(vs_one), min(vs_one), max(vs_one))
        line(v, title, d)
    for names, target, what in (
            ([n for n in sparse_seal if n not in local_seal], 0.7,
             "sealed index_map (random) and mask writes"),
            ([n + "_adopt_seal" for n in sparse], 0.9, "sealed index_map and mask writes of adopted tensors")):
        title = "%s >= %.1fx the OpenMP loop, rows >= 1e6 [write + wait + seal, parallel]" % (what, target)
        vs_omp = []
        for c in sel(names, "parallel"):
            k = (c["loop_key"], c["rows"], c["lanes"], c["dtype"])
            if k in omp and omp[k] > 0 and fnum(c["gbps"]) > 0:
                vs_omp.append((fnum(c["gbps"]) / omp[k], c))
        if not vs_omp:
            line("n/a", title, "no OpenMP loop measured in this run")
            continue
        v, d = judge(vs_omp, target)
        line(v, title, d)
    # Map: the cycle may cost the fill plus at most one copy of the payload:
    # t_cycle <= t_fill + t_memcpy, i.e. 1/gbps <= 1/fill_gbps + 1/memcpy_gbps; and the sealed
    # storage must be the map buffer itself (zero copies, recorded by the workload).
    # Time stands in for bytes only where the payload outweighs the cycle's fixed cost (four API
    # calls, a few microseconds): rows >= MAP_TIME_ROWS. Below, the storage check alone holds
    # the target, and the fixed cost is reported.
    for exec_ in execs:
        every = [r for r in kst if r["workload"] == "map_fill_unmap_seal_dense" and r["exec"] == exec_]
        small = [r for r in every if int(r["rows"]) < MAP_TIME_ROWS]
        not_in_place = [r for r in every if "storage_is_map_buffer=1" not in r.get("note", "")]
        if every:
            detail = "%d/%d cases, every row count" % (len(every) - len(not_in_place), len(every))
            if small:
                fewest = min(int(r["rows"]) for r in small)
                us = [1e6 * fnum(r["median_s"]) for r in small if int(r["rows"]) == fewest]
                detail += "; at %s rows a cycle takes %.1f-%.1f us, the fixed cost of the calls" % (
                    rows_label(fewest), min(us), max(us))
            line("PASS" if not not_in_place else "FAIL",
                 "dense map -> fill -> unmap -> seal: the sealed storage is the map buffer, zero payload "
                 "copies [%s]" % exec_, detail)
        cases = [r for r in every if int(r["rows"]) >= MAP_TIME_ROWS
                 and fnum(r["gbps"]) > 0 and fnum(r["loop_gbps"]) > 0 and fnum(r["memcpy_gbps"]) > 0]
        if not cases:
            if "map_fill_unmap_seal_dense" in pending:
                line("SKIP", "dense map -> fill -> unmap -> seal <= fill + one payload copy [%s]" % exec_,
                     "SKIP (not implemented): " + pending["map_fill_unmap_seal_dense"])
            else:
                line("n/a", "dense map -> fill -> unmap -> seal <= fill + one payload copy [%s]" % exec_,
                     "no measurement")
            continue
        ok = [c for c in cases if 1 / fnum(c["gbps"]) <= 1 / fnum(c["loop_gbps"]) + 1 / fnum(c["memcpy_gbps"])
              and "storage_is_map_buffer=1" in c.get("note", "")]
        worst = max(cases, key=lambda c: (1 / fnum(c["gbps"])) / (1 / fnum(c["loop_gbps"]) + 1 / fnum(c["memcpy_gbps"])))
        excess = (1 / fnum(worst["gbps"]) - 1 / fnum(worst["loop_gbps"])) / (1 / fnum(worst["memcpy_gbps"]))
        line("PASS" if len(ok) == len(cases) else "FAIL",
             "dense map -> fill -> unmap -> seal <= fill + one payload copy, rows >= %s [%s]" % (
                 rows_label(MAP_TIME_ROWS), exec_),
             "%d/%d cases; worst: cycle costs the fill + %.2f payload copies (%s %sx%s)" % (
                 len(ok), len(cases), excess, rows_label(worst["rows"]), short_dtype(worst["dtype"]), worst["lanes"]))
    # The compact path dictionary (issue 16): at 1e7 paths, <= 0.3 us per intern and <= 48 bytes
    # per path (resident memory the stage gained, hash index included).
    for exec_ in execs:
        for name, label in (("intern_path", "one kstage_intern_path call per path"),
                            ("intern_paths_bulk", "one kstage_intern_paths call")):
            cases = [r for r in kst if r["workload"] == name and r["exec"] == exec_ and int(r["rows"]) >= 10**7
                     and fnum(r["median_s"]) > 0]
            what = "path dictionary at 1e7 paths: <= 0.3 us per intern and <= 48 B per path [%s, %s]" % (label, exec_)
            if not cases:
                line("n/a", what, "no measurement")
                continue
            us = [1e6 * fnum(c["median_s"]) / fnum(c["items"]) for c in cases]
            bpp = [note_number(c, "bytes_per_path") for c in cases
                   if "bytes_per_path=" in c.get("note", "")]
            ok = max(us) <= 0.3 and bpp and max(bpp) <= 48
            line("PASS" if ok else "FAIL", what, "worst %.3f us per intern, %s B per path over %d case(s)" % (
                max(us), "%.1f" % max(bpp) if bpp else "?", len(cases)))
    # The C++ API adds no work: its dense write + seal against the C API's, same shape and run.
    for exec_ in execs:
        c_api = {(r["rows"], r["dtype"], r["lanes"]): fnum(r["gbps"]) for r in sel(["write_dense_seal"], exec_)}
        pairs = [(fnum(r["gbps"]) / c_api[k], r) for r in sel(["cpp_write_dense_seal"], exec_)
                 for k in [(r["rows"], r["dtype"], r["lanes"])] if c_api.get(k, 0) > 0 and fnum(r["gbps"]) > 0]
        what = "C++ API dense write + seal >= 0.97x the C API, rows >= 1e6 [cpp_write_dense_seal / write_dense_seal, %s]" % exec_
        if not pairs:
            line("n/a", what, "no measurement")
            continue
        worst_v, worst_c = min(pairs, key=lambda x: x[0])
        ok = sum(1 for v, _ in pairs if v >= 0.97)
        line("PASS" if ok == len(pairs) else "FAIL", what,
             "%d/%d cases; median %.3fx; worst %.3fx (%s %sx%s)" % (
                 ok, len(pairs), statistics.median(v for v, _ in pairs), worst_v, rows_label(worst_c["rows"]),
                 short_dtype(worst_c["dtype"]), worst_c["lanes"]))
    for exec_ in execs:
        cases = [r for r in kst if r["workload"] == "dlpack_roundtrip" and r["exec"] == exec_
                 and fnum(r["median_s"]) > 0]
        if not cases:
            if "dlpack_roundtrip" in pending:
                line("SKIP", "DLPack export + import round trip <= 1 us per tensor on the host [%s]" % exec_,
                     "SKIP (not implemented): " + pending["dlpack_roundtrip"])
            else:
                line("n/a", "DLPack export + import round trip <= 1 us per tensor on the host [%s]" % exec_,
                     "no measurement")
            continue
        us = [1e6 * fnum(c["median_s"]) / fnum(c["items"]) for c in cases]
        line("PASS" if max(us) <= 1.0 else "FAIL",
             "DLPack export + import round trip <= 1 us per tensor on the host [%s]" % exec_,
             "worst %.3f us per tensor over %d cases" % (max(us), len(us)))
    lines.extend(scene_targets(kst, omp))
    lines.extend(clone_targets(kst))
    return lines


def scene_targets(kst, omp):
    """Issue #46, section 5: world transforms (perf/src/wl_scene.cpp), float64 x 16.
    - full compute (compute + wait + seal), parallel, >= 1e6 prims: >= 0.5x the bandwidth of memcpy of
      the bytes it must touch (384 B per prim: ratio_memcpy);
    - full compute, serial: >= 1x the plain serial loop (ratio_loop), every tree;
    - incremental compute after 1% of the roots moved: <= 5% of the full compute's time, same tree,
      exec and run."""
    lines = []

    def line(verdict, what, detail):
        lines.append("%-4s  %s: %s" % (verdict, what, detail))

    full = [r for r in kst if r["workload"].startswith("transform_full_")]
    inc = [r for r in kst if r["workload"].startswith("transform_incremental_1pct_")]
    if not full and not inc:
        return lines
    cases = [r for r in full if r["exec"] == "parallel" and int(r["rows"]) >= TARGET_ROWS]
    v, d = evaluate(cases, "ratio_memcpy", 0.5)
    # Reported beside it: the plain loop under OpenMP, one parallel for per level, same tree.
    vs_omp = ["%.2fx" % (fnum(c["gbps"]) / omp[k]) for c in cases
              for k in [(c["loop_key"], c["rows"], c["lanes"], c["dtype"])] if omp.get(k, 0) > 0]
    if vs_omp:
        d += "; vs the OpenMP loop (per level): %s, reported" % ", ".join(vs_omp)
    line(v, "world transforms, full compute + seal >= 0.5x memcpy of 384 B/prim, prims >= 1e6 "
            "[transform_full_*, parallel]", d)
    v, d = evaluate([r for r in full if r["exec"] == "serial"], "ratio_loop", 1.0)
    line(v, "world transforms, full compute + seal >= 1x the plain serial loop (topological order) "
            "[transform_full_*, serial]", d)
    by_key = {(r["workload"][len("transform_full_"):], r["exec"], r["rows"]): r for r in full}
    shares = []
    for r in inc:
        f = by_key.get((r["workload"][len("transform_incremental_1pct_"):], r["exec"], r["rows"]))
        if f and fnum(f["median_s"]) > 0 and fnum(r["median_s"]) > 0:
            shares.append((fnum(r["median_s"]) / fnum(f["median_s"]), r))
    what = "world transforms, incremental compute + seal after 1% of the roots moved <= 5% of the full " \
           "compute [transform_incremental_1pct_*, both execs]"
    if not shares:
        line("n/a", what, "no pair of measurements")
    else:
        ok = sum(1 for s, _ in shares if s <= 0.05)
        worst_s, worst_r = max(shares, key=lambda x: x[0])
        line("PASS" if ok == len(shares) else "FAIL", what,
             "%d/%d cases; %s; worst %.1f%% (%s %s %s)" % (
                 ok, len(shares), ", ".join("%s %s %s %.1f%%" % (
                     r["workload"][len("transform_incremental_1pct_"):], rows_label(r["rows"]), r["exec"],
                     100 * s) for s, r in shares),
                 100 * worst_s, worst_r["workload"], rows_label(worst_r["rows"]), worst_r["exec"]))
    return lines


def clone_targets(kst):
    """Issue #47: clone (perf/src/wl_clone.cpp), each run in a fresh stage, until the copies are readable.
    - clone_env (20 prims, 40 attributes) to 4,096 targets: >= 0.5x the bandwidth of memcpy of the bytes
      the clone produces into memory like the clone's, both execs: memcpy between warm buffers
      (ratio_memcpy), or, where the clone's runs wrote fresh memory (CSV note fresh_pages, the pages
      the kernel gave the timed region, at least half of value_pages), memcpy into freshly allocated
      memory (memcpy_fresh_gbps); the 1-prim source to 1e6 targets reported beside;
    - every clone >= 10x faster than the read-and-write route (clone_<source>_read_write: read the source,
      one index_map write per attribute to every copy, seal) at the same targets, exec and run."""
    lines = []

    def line(verdict, what, detail):
        lines.append("%-4s  %s: %s" % (verdict, what, detail))

    clones = sorted((r for r in kst if r["workload"] in ("clone_env", "clone_prim")),
                    key=lambda r: (r["workload"], int(r["rows"]), r["exec"]))
    if not clones:
        return lines
    def wrote_fresh(r):  # the clone's timed runs were given fresh pages for most of its values
        return note_number(r, "value_pages") > 0 and note_number(r, "fresh_pages") >= 0.5 * note_number(r, "value_pages")

    def fresh_ratio(r):  # the ratio to memcpy into freshly allocated memory
        g = note_number(r, "memcpy_fresh_gbps")
        return fnum(r["gbps"]) / g if g > 0 else 0.0

    def fresh(r):
        x = fresh_ratio(r)
        return " (%.2fx memcpy into fresh memory%s)" % (
            x, "; wrote fresh pages" if wrote_fresh(r) else "") if x > 0 else ""

    def like_memory(r):  # the ratio to memcpy into memory like the clone's
        return fresh_ratio(r) if wrote_fresh(r) and fresh_ratio(r) > 0 else fnum(r["ratio_memcpy"])

    cases = [r for r in clones if r["workload"] == "clone_env" and int(r["rows"]) == 4096]
    vals = [(like_memory(r), r) for r in cases if like_memory(r) > 0]
    v, d = judge(vals, 0.5) if vals else ("n/a", "no measurement (baseline missing or filtered out)")
    if cases:
        d = "%s; %s" % (d, ", ".join("%s %.2fx%s" % (r["exec"], fnum(r["ratio_memcpy"]), fresh(r))
                                     for r in cases))
    others = [r for r in clones if not (r["workload"] == "clone_env" and int(r["rows"]) == 4096)]
    if others:
        d += "; reported: %s" % ", ".join("%s %s %s %.2fx%s" % (
            r["workload"], rows_label(r["rows"]), r["exec"], fnum(r["ratio_memcpy"]), fresh(r))
            for r in others)
    line(v, "clone >= 0.5x memcpy of the bytes it produces into memory like the clone's, 4,096 "
            "targets [clone_env + wait + seal, both execs; warm buffers, or fresh memory where the "
            "clone's runs were given fresh pages]", d)
    by_key = {(r["workload"], r["exec"], r["rows"]): r for r in kst
              if r["workload"] in ("clone_env_read_write", "clone_prim_read_write")}
    speedups = []
    for r in clones:
        rw = by_key.get((r["workload"] + "_read_write", r["exec"], r["rows"]))
        if rw and fnum(rw["median_s"]) > 0 and fnum(r["median_s"]) > 0:
            speedups.append((fnum(rw["median_s"]) / fnum(r["median_s"]), r))
    what = "clone >= 10x faster than the read-and-write route [clone_* vs clone_*_read_write, both execs]"
    if not speedups:
        line("n/a", what, "no pair of measurements")
    else:
        ok = sum(1 for x, _ in speedups if x >= 10)
        worst_x, worst_r = min(speedups, key=lambda x: x[0])
        line("PASS" if ok == len(speedups) else "FAIL", what,
             "%d/%d cases; %s; worst %.1fx (%s %s %s)" % (
                 ok, len(speedups), ", ".join("%s %s %s %.1fx" % (
                     r["workload"], rows_label(r["rows"]), r["exec"], x) for x, r in speedups),
                 worst_x, worst_r["workload"], rows_label(worst_r["rows"]), worst_r["exec"]))
    return lines


# ---- plots ------------------------------------------------------------------------------------
def pyplot():
    """matplotlib.pyplot on the Agg backend, or None when matplotlib is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        return plt
    except ImportError:
        return None


def finish_axes(ax, xlabel, ylabel, legend_size=7):
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=legend_size)


def save_figure(plt, fig, title, path):
    fig.suptitle(title)
    fig.savefig(path, dpi=80)
    plt.close(fig)


def plots(outdir, kst, base, numpy_rows):
    plt = pyplot()
    if plt is None:
        return "matplotlib is not installed (run scripts/setup.sh --perf); no plots"
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator
    pdir = os.path.join(outdir, "plots")
    os.makedirs(pdir, exist_ok=True)
    loops = {(r["workload"],) + shape_key(r): r for r in base if r["impl"] == "serial_loop" and r["status"] == "ok"}
    omp_loops = {(r["workload"],) + shape_key(r): r for r in base if r["impl"] == "omp_loop" and r["status"] == "ok"}
    nps = {(r["workload"],) + shape_key(r): r for r in numpy_rows if r["status"] == "ok"}
    dense = {(r["impl"], r["exec"]) + shape_key(r): r for r in base
             if r["impl"] == "deep_copy" and r["status"] == "ok"}
    by_w = defaultdict(list)
    for r in kst:
        by_w[r["workload"]].append(r)
    made = 0
    for w, rs in sorted(by_w.items()):
        panels = sorted({(r["dtype"], int(r["lanes"])) for r in rs})
        cols = min(3, len(panels))
        nrows = (len(panels) + cols - 1) // cols
        fig, axes = plt.subplots(nrows, cols, figsize=(5.2 * cols, 3.8 * nrows), squeeze=False)
        for ax, (dt, lanes) in zip(axes.flat, panels):
            series = defaultdict(list)
            for r in rs:
                if r["dtype"] != dt or int(r["lanes"]) != lanes:
                    continue
                n = int(r["rows"])
                series["kstage " + r["exec"]].append((n, fnum(r["gbps"])))
                if fnum(r["memcpy_gbps"]) > 0:
                    series["memcpy (same payload)"].append((n, fnum(r["memcpy_gbps"])))
                k = (r["loop_key"], r["rows"], r["lanes"], r["dtype"])
                if k in loops:
                    series["serial loop"].append((n, fnum(loops[k]["gbps"])))
                if k in omp_loops:
                    series["OpenMP loop"].append((n, fnum(omp_loops[k]["gbps"])))
                k = (r["numpy_key"], r["rows"], r["lanes"], r["dtype"])
                if k in nps:
                    series["numpy"].append((n, fnum(nps[k]["gbps"])))
                if r["loop_key"] == "copy":
                    for ex in ("serial", "parallel"):
                        d = dense.get(("deep_copy", ex) + shape_key(r))
                        if d:
                            series["Kokkos deep_copy " + ex].append((n, fnum(d["gbps"])))
            for name, pts in sorted(series.items()):
                pts = sorted(set(pts))
                xs, ys = [p[0] for p in pts], [p[1] for p in pts]
                if not any(y > 0 for y in ys):
                    continue
                if name.startswith("kstage"):
                    ax.plot(xs, ys, "-", marker="o" if "serial" in name else "s", markersize=4,
                            linewidth=2.2, label=name)
                else:
                    ax.plot(xs, ys, "--" if ("numpy" in name or "loop" in name) else ":", marker=".",
                            markersize=4, linewidth=1.3, label=name)
            ax.set_xscale("log")
            ax.set_yscale("log")
            # Plain labels and no minor ticks: log-axis mathtext labels cost ~0.5 s per figure.
            ax.xaxis.set_major_locator(LogLocator(base=10, numticks=10))
            ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0), numticks=12))
            for axis in (ax.xaxis, ax.yaxis):
                axis.set_minor_locator(NullLocator())
                axis.set_major_formatter(FuncFormatter(lambda v, _: "%g" % v))
            ax.set_xlabel("rows")
            ax.set_ylabel("GB/s (payload)")
            ax.set_title("%s x%d" % (dt, lanes), fontsize=10)
            ax.grid(True, which="major", alpha=0.3)
            ax.legend(fontsize=7)
        for ax in list(axes.flat)[len(panels):]:
            ax.axis("off")
        # (no tight_layout: on log axes it costs ~0.7 s per figure)
        fig.subplots_adjust(left=0.08, right=0.98, bottom=0.14 / nrows, top=1 - 0.12 / nrows,
                            wspace=0.28, hspace=0.45)
        save_figure(plt, fig, w, os.path.join(pdir, w + ".png"))
        made += 1
    return "%d plots in plots/" % made


# ---- key figures (docs/performance.md, "Current figures") ------------------------------------------
KEY_WORKLOADS = ["write_dense_seal", "write_index_map_random_seal", "write_index_map_local_seal",
                 "write_mask_05_seal", "read_latest_compact", "read_shuffled_compact",
                 "read_change_range_compact", "ragged_write_seal_mean4", "ragged_read_compact_mean4",
                 "map_fill_unmap_seal_dense", "particles_tick"]


def key_figures(kst):
    """The one table of current figures docs/performance.md shows: per key workload and host
    execution, the largest row count measured, float32 x 3 where measured (else the widest
    float32 shape), GB/s, the ratios to memcpy and to the serial loop, and the median time."""
    md = ["## Key figures\n",
          "The table docs/performance.md shows (\"Current figures\"): per key workload and host execution, "
          "the largest row count measured at float32 (3 lanes where measured).\n",
          "| workload | exec | rows | lanes | GB/s | ratio to memcpy | ratio to serial loop | median |",
          "|---|---|---:|---:|---:|---:|---:|---:|"]
    any_row = False
    for w in KEY_WORKLOADS:
        for exec_ in ("serial", "parallel"):
            cases = [r for r in kst if r["workload"] == w and r["exec"] == exec_ and r["dtype"] == "float32"]
            if not cases:
                continue
            best = max(cases, key=lambda r: (int(r["rows"]), int(r["lanes"]) == 3, int(r["lanes"])))
            md.append("| %s | %s | %s | %s | %.3f | %s | %s | %s |" % (
                w, exec_, rows_label(best["rows"]), best["lanes"], fnum(best["gbps"]),
                ratio(best["ratio_memcpy"]), ratio(best["ratio_loop"]), median_label(best)))
            any_row = True
    if not any_row:
        md.append("| (none of the key workloads was measured in this run) | | | | | | | |")
    md.append("")
    return md


# ---- the scale workload (kstage_perf --scale: scale.csv) --------------------------------------------
def scale_section(outdir):
    """Target lines, a plot and a markdown table from scale.csv ([], "" when there is none)."""
    rows = load(os.path.join(outdir, "scale.csv"))
    if not rows:
        return [], []
    lines, md = [], []
    for r in rows:
        r["n"] = int(r["n"])
    big = [r for r in rows if r["kind"] == "range" and r["n"] >= 10**8 and not r["error"]]
    # The speed target compares the first write + seal with memcpy into freshly allocated memory:
    # the copy any first write of a client's array makes (most of it the kernel's first touch of
    # each page). The ratio to memcpy between warm buffers is printed beside it.
    what = ("1e8-prim range: stage memory <= 1.5x payload, first dense write + seal >= 0.7x memcpy "
            "into fresh memory [scale]")
    if not big:
        lines.append("%-4s  %s: %s" % ("n/a", what, "no 1e8-prim measurement (kstage_perf --scale --full)"))
    else:
        r = max(big, key=lambda x: x["n"])
        mem = fnum(r["stage_bytes"]) / fnum(r["payload_bytes"])
        speed = fnum(r.get("write_seal_vs_fresh_memcpy"))
        lines.append("%-4s  %s: memory %.2fx payload (%.2f GB for %.2f GB), write + seal %.2fx memcpy into "
                     "fresh memory (%.2fx memcpy between warm buffers); adopting a managed tensor %.3g s" % (
                         "PASS" if mem <= 1.5 and speed >= 0.7 else "FAIL", what, mem,
                         fnum(r["stage_bytes"]) / 1e9, fnum(r["payload_bytes"]) / 1e9, speed,
                         fnum(r["write_seal_vs_memcpy"]), fnum(r.get("t_adopt_seal"))))
    md.append("## Scale (kstage_perf --scale)\n")
    md.append("| kind | prims | payload | stage memory | bytes per prim beyond payload | names | query | "
              "write + seal | mask + seal | latest read | change read | adopted write + seal | "
              "write + seal vs memcpy (warm / fresh) |")
    md.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in sorted(rows, key=lambda x: (x["kind"], x["n"])):
        md.append("| %s | %s | %.1f MB | %.1f MB | %.1f | %.3g s | %.3g s | %.3g s | %.3g s | %.3g s | %.3g s | "
                  "%.3g s | %.2fx / %.2fx |%s" % (
                      r["kind"], rows_label(r["n"]), fnum(r["payload_bytes"]) / 1e6, fnum(r["stage_bytes"]) / 1e6,
                      fnum(r["bytes_per_prim"]), fnum(r["t_names"]), fnum(r["t_query"]), fnum(r["t_write_seal"]),
                      fnum(r["t_mask_seal"]), fnum(r["t_read_latest"]), fnum(r["t_read_change"]),
                      fnum(r.get("t_adopt_seal")), fnum(r["write_seal_vs_memcpy"]),
                      fnum(r.get("write_seal_vs_fresh_memcpy")), (" FAILED: " + r["error"]) if r["error"] else ""))
    md.append("")
    plt = pyplot()
    if plt is None:
        md.append("(no matplotlib: no scale plot)\n")
    else:
        fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
        for kind, style in (("range", "o-"), ("explicit", "s--")):
            pts = sorted((r for r in rows if r["kind"] == kind and not r["error"]), key=lambda x: x["n"])
            if not pts:
                continue
            n = [r["n"] for r in pts]
            a.plot(n, [max(fnum(r["stage_bytes"]), 1) / r["n"] for r in pts], style, label=kind + ": stage bytes")
            b.plot(n, [fnum(r["t_write_seal"]) / r["n"] for r in pts], style, label=kind + ": write + seal")
            b.plot(n, [fnum(r["t_names"]) / r["n"] for r in pts], style, alpha=0.6, label=kind + ": names")
        a.axhline(12 * 1.5, color="gray", lw=0.8, ls=":", label="1.5x payload (12 B)")
        for ax, ylabel in ((a, "bytes per prim"), (b, "seconds per prim")):
            ax.set_xscale("log")
            ax.set_yscale("log")
            finish_axes(ax, "prims", ylabel)
        save_figure(plt, fig, "kstage at scale (float32 x 3 column)", os.path.join(outdir, "scale.png"))
        md.append("![scale](scale.png)\n")
    return lines, md


def threads_section(outdir):
    """A markdown table and a plot of parallel efficiency from threads/<T>/<filter>/results.csv
    (perf.sh's thread-scaling runs, --kokkos-threads=T); [] when there are none."""
    base = os.path.join(outdir, "threads")
    if not os.path.isdir(base):
        return []
    gbps = {}  # (workload, impl) -> {threads: GB/s}
    for t in os.listdir(base):
        if not t.isdigit():
            continue
        for sub in os.listdir(os.path.join(base, t)):
            for r in load(os.path.join(base, t, sub, "results.csv")):
                if r["status"] != "ok" or r["exec"] != "parallel" or fnum(r["gbps"]) <= 0:
                    continue
                if r["impl"] not in ("kstage", "omp_loop"):
                    continue
                gbps.setdefault((r["workload"], r["impl"]), {})[int(t)] = fnum(r["gbps"])
    if not gbps:
        return []
    counts = sorted({t for v in gbps.values() for t in v})
    md = ["## Thread scaling (--kokkos-threads)\n",
          "Parallel host execution at 1e6 rows, float32 x 3, one kstage_perf run per thread count "
          "(scripts/perf.sh). Efficiency at T threads = GB/s(T) / (T x GB/s(1)): 100% is linear "
          "scaling; the plain OpenMP loops show what the machine itself allows for each access "
          "pattern.\n",
          "| workload | impl | " + " | ".join("GB/s at %d" % t for t in counts) + " | " +
          " | ".join("efficiency at %d" % t for t in counts if t > 1) + " |",
          "|---|---|" + "---:|" * (len(counts) + len([t for t in counts if t > 1]))]
    for (w, impl), v in sorted(gbps.items()):
        one = v.get(1, 0)
        cells = ["%.2f" % v[t] if t in v else "-" for t in counts]
        eff = ["%.0f%%" % (100 * v[t] / (t * one)) if t in v and one > 0 else "-" for t in counts if t > 1]
        md.append("| %s | %s | %s | %s |" % (w, impl, " | ".join(cells), " | ".join(eff)))
    md.append("")
    plt = pyplot()
    if plt is None:
        md.append("(no matplotlib: no thread-scaling plot)\n")
    else:
        fig, ax = plt.subplots(figsize=(7, 4))
        for (w, impl), v in sorted(gbps.items()):
            one = v.get(1, 0)
            if one <= 0 or len(v) < 2:
                continue
            ts = sorted(v)
            ax.plot(ts, [v[t] / (t * one) for t in ts], "o-" if impl == "kstage" else "s:",
                    label="%s (%s)" % (w, impl), alpha=1.0 if impl == "kstage" else 0.6)
        ax.set_xticks(counts)
        finish_axes(ax, "threads (--kokkos-threads)", "parallel efficiency", legend_size=6)
        save_figure(plt, fig, "kstage thread scaling (1e6 rows, float32 x 3)",
                    os.path.join(outdir, "threads.png"))
        md.append("![threads](threads.png)\n")
    return md


# ---- main -------------------------------------------------------------------------------------
# ---- the ADIOS2 bridge (kstage_perf_adios2: adios2.csv) -------------------------------------------
def adios2_section(outdir):
    """Target lines and a markdown table from adios2.csv ([], [] when there is none): the
    bridge's checkpoint and restart against ADIOS2 used directly, held to >= 0.9x at 1e7 rows."""
    rows = load(os.path.join(outdir, "adios2.csv"))
    if not rows:
        return [], []
    lines = []
    md = ["## ADIOS2 bridge (kstage_perf_adios2)\n",
          "| workload | rows | kstage s | direct ADIOS2 s | ratio |", "|---|---|---|---|---|"]
    for r in rows:
        ratio = fnum(r["ratio"])
        md.append("| %s | %s | %.4g | %.4g | %.2fx |" % (r["workload"], rows_label(r["rows"]), fnum(r["kstage_s"]),
                                                      fnum(r["direct_s"]), ratio))
        what = "ADIOS2 %s >= 0.9x ADIOS2 directly, float32 x 3, rows >= 1e7 [adios2]" % r["workload"]
        if r["workload"] == "checkpoint":
            # The durable checkpoint against a write left in the page cache: the flush to stable
            # storage is the guarantee's price (docs/performance.md); checkpoint_durable holds the
            # target against ADIOS2 flushed as durably.
            lines.append("info  ADIOS2 checkpoint vs ADIOS2 directly without its flush, float32 x 3: "
                         "%.2fx (%.3g s vs %.3g s; held: checkpoint_durable)" % (
                             ratio, fnum(r["kstage_s"]), fnum(r["direct_s"])))
            continue
        if int(r["rows"]) < 10**7:
            lines.append("%-4s  %s: only %s rows measured (%.2fx; kstage_perf_adios2 --full)" % (
                "n/a", what, rows_label(r["rows"]), ratio))
        else:
            lines.append("%-4s  %s: %.2fx (%.3g s vs %.3g s)" % ("PASS" if ratio >= 0.9 else "FAIL", what, ratio,
                                                              fnum(r["kstage_s"]), fnum(r["direct_s"])))
    md.append("")
    return lines, md


def main():
    if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return 2
    outdir = sys.argv[1]
    results = load(os.path.join(outdir, "results.csv"))
    scale_lines, scale_md = scale_section(outdir)
    if not results and scale_lines:  # a --scale run alone
        with open(os.path.join(outdir, "summary.md"), "w") as f:
            f.write("# kstage perf summary (scale)\n\n```\n" + "\n".join(scale_lines) + "\n```\n\n" +
                    "\n".join(scale_md) + "\n")
        print("targets (same-run baselines):")
        for line in scale_lines:
            print("  " + line)
        return 0
    if not results:
        print("report.py: no results.csv in %s" % outdir, file=sys.stderr)
        return 1
    numpy_rows = load(os.path.join(outdir, "numpy.csv"))
    meta = read_meta(outdir)
    kst = [r for r in results if r["impl"] == "kstage" and r["status"] == "ok"]
    base = [r for r in results if r["impl"] != "kstage"]
    pending = [r for r in results if r["status"] == "pending"]
    skipped = [r for r in results if r["impl"] == "kstage" and r["status"] == "skipped"]
    failed = [r for r in results if r["status"] in ("error", "verify-failed")] + \
             [r for r in numpy_rows if r["status"] in ("error", "verify-failed")]

    nps = {(r["workload"],) + shape_key(r): r for r in numpy_rows if r["status"] == "ok"}
    for r in kst:
        k = (r["numpy_key"], r["rows"], r["lanes"], r["dtype"])
        g = fnum(r["gbps"])
        r["numpy_gbps"] = nps[k]["gbps"] if k in nps else ""
        r["ratio_numpy"] = "%.4g" % (g / fnum(nps[k]["gbps"])) if k in nps and fnum(nps[k]["gbps"]) > 0 else ""

    fam = {f: i for i, f in enumerate(FAMILY_ORDER)}
    kst.sort(key=lambda r: (fam.get(r["family"], 99), r["workload"], r["exec"], int(r["rows"]),
                            r["dtype"], int(r["lanes"])))
    omp = {(r["workload"],) + shape_key(r): fnum(r["gbps"]) for r in base
           if r["impl"] == "omp_loop" and r["status"] == "ok" and fnum(r["gbps"]) > 0}
    adios2_lines, adios2_md = adios2_section(outdir)
    lines = targets(kst, {r["workload"]: r["note"] for r in pending}, omp) + scale_lines + adios2_lines

    # summary.csv
    fields = ["workload", "family", "exec", "rows", "lanes", "dtype", "params", "payload_bytes",
              "median_s", "gbps", "rate", "rate_unit", "memcpy_gbps", "loop_key", "loop_gbps",
              "numpy_key", "numpy_gbps", "ratio_memcpy", "ratio_numpy", "ratio_loop", "note"]
    with open(os.path.join(outdir, "summary.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        for r in kst:
            w.writerow(r)
    with open(os.path.join(outdir, "targets.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")

    plot_note = plots(outdir, kst, base, numpy_rows)

    md = []
    md.append("# kstage perf summary (%s mode)\n" % meta.get("mode", "?"))
    md.append("Run finished %s on `%s` (%s CPUs, Kokkos host concurrency %s), kstage_perf %s s, "
              "peak RSS %s MiB, working-set cap %s GiB. Every ratio compares numbers measured in this run "
              "at the same size: **memcpy** of the same payload bytes (warm buffers), **numpy** "
              "(perf/numpy_baseline.py) and the **plain serial C++ loop** doing the same "
              "gather/scatter/masked copy. Bytes = payload bytes (docs/performance.md).\n" % (
                  meta.get("finished", "?"), meta.get("host", "?"), meta.get("nproc", "?"),
                  meta.get("kokkos_host_concurrency", "?"), meta.get("seconds", "?"),
                  meta.get("peak_rss_mib", "?"), meta.get("mem_cap_gib", "?")))
    md.append("## Targets\n")
    md.append("```\n" + "\n".join(lines) + "\n```\n")
    md.append("The compact latest read (`read_latest_compact`) is the read held to the dense-read target: a "
              "zero-copy latest read (`read_latest`) hands out the column's own storage and moves no payload, "
              "so its \"bandwidth\" only measures per-prim bookkeeping.\n")
    if failed:
        md.append("## Failures\n")
        for r in failed:
            md.append("- %s %s %s %s: %s %s" % (r["impl"], r["workload"], r["exec"], r["rows"], r["status"], r["note"]))
        md.append("")
    if pending:
        md.append("## Pending (not implemented in kstage yet)\n")
        for r in pending:
            md.append("- `%s`: SKIP (not implemented): %s" % (r["workload"], r["note"]))
        md.append("")
    key_md = key_figures(kst)
    md.extend(key_md)
    with open(os.path.join(outdir, "key_figures.md"), "w") as f:
        f.write("\n".join(key_md[2:]) + "\n")
    md.append("## kstage measurements\n")
    md.append("| workload | exec | rows | lanes | dtype | GB/s | ratio to memcpy | ratio to numpy | "
              "ratio to serial loop | median |")
    md.append("|---|---|---:|---:|---|---:|---:|---:|---:|---:|")
    for r in kst:
        med_s = median_label(r)
        if r["family"] == "particles" and fnum(r["rate"]) > 0:
            med_s += " (%.1f ticks/s)" % fnum(r["rate"])
        md.append("| %s | %s | %s | %s | %s | %.3f | %s | %s | %s | %s |" % (
            r["workload"], r["exec"], rows_label(r["rows"]), r["lanes"], r["dtype"], fnum(r["gbps"]),
            ratio(r["ratio_memcpy"]), ratio(r["ratio_numpy"]), ratio(r["ratio_loop"]), med_s))
    md.append("")
    md.extend(scale_md)
    md.extend(adios2_md)
    md.extend(threads_section(outdir))
    md.append("## Baselines\n")
    md.append("| baseline | impl | exec | rows | lanes | dtype | GB/s | median |")
    md.append("|---|---|---|---:|---:|---|---:|---:|")
    for r in sorted([b for b in base if b["status"] == "ok"] + [n for n in numpy_rows if n["status"] == "ok"],
                    key=lambda r: (r["workload"], r["impl"], r["exec"], int(r["rows"]), r["dtype"], int(r["lanes"]))):
        med = fnum(r["median_s"])
        md.append("| %s | %s | %s | %s | %s | %s | %.3f | %s |" % (
            r["workload"], r["impl"], r["exec"], rows_label(r["rows"]), r["lanes"], r["dtype"], fnum(r["gbps"]),
            "%.1f us" % (med * 1e6) if med < 1e-3 else "%.2f ms" % (med * 1e3)))
    md.append("")
    ex = os.path.join(outdir, "particles_example.txt")
    if os.path.exists(ex):
        md.append("## examples/c/particles (its own report, default host execution)\n")
        md.append("```\n" + open(ex).read().rstrip() + "\n```\n")
    if skipped:
        md.append("## Skipped\n")
        md.append("%d kstage cases were skipped by the working-set cap or the quick-mode payload cap "
                  "(see `status`/`note` in results.csv); e.g. %s." % (
                      len(skipped), "; ".join(sorted({"%s %s: %s" % (r["workload"], rows_label(r["rows"]), r["note"])
                                                     for r in skipped})[:3])))
        md.append("")
    md.append("Plots: %s.\n" % plot_note)
    with open(os.path.join(outdir, "summary.md"), "w") as f:
        f.write("\n".join(md))

    print("report: %d kstage measurements, %d baseline rows, %d numpy rows; %s" % (
        len(kst), len(base), len(numpy_rows), plot_note))
    print("summary: %s" % os.path.join(outdir, "summary.md"))
    print("targets (same-run baselines):")
    for l in lines:
        print("  " + l)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
