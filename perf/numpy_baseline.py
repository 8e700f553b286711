#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""numpy baselines of the kstage perf suite.

Reads the numpy_plan.csv that kstage_perf wrote (one line per baseline key and shape that a
kstage measurement is compared with) and measures numpy's equivalent of each, writing
numpy.csv with the same columns as results.csv (impl = numpy, exec = serial). perf/report.py
merges the two. The bytes convention is the one of docs/performance.md: payload bytes, i.e. the
rows the operation delivers times the row size.

    numpy_baseline.py RESULTS_DIR [--quick | --smoke]

Keys (arrays are (rows, lanes) in C order; `idx`/`perm` are int64):
  copy                    np.copyto(dst, src)
  gather_perm             np.take(src, perm, axis=0, out=dst)
  gather_scatter_stride4  np.take(src, idx, axis=0, out=tmp), then put: dst[idx] = tmp
                          (np.put(dst, idx, tmp) for one lane); idx = 0, 4, 8, ...
  masked_p50, masked_p05  np.copyto(dst, src, where=mask[:, None])
  scatter_p05             put: dst[t] = src (np.put for one lane), t sorted, 5% of rows
  scan_gather_p05         np.take(col, np.flatnonzero(changed_at == tick), axis=0)
  ragged_pack_<dist>      np.concatenate(list_of_rows, axis=0, out=dst)
  particles_p05           the particles tick pair: copyto(where=mask) x2, take, put x2, take
"""
import argparse
import csv
import math
import os
import sys
import time

try:
    import numpy as np
except ImportError:  # pragma: no cover - reported to the caller
    sys.stderr.write("numpy_baseline.py: numpy is not installed (run scripts/setup.sh --perf)\n")
    sys.exit(3)

HEADER = ("mode,workload,family,impl,exec,rows,lanes,dtype,row_bytes,params,payload_bytes,items,"
          "reps,inner,median_s,min_s,max_s,gbps,rate,rate_unit,loop_key,numpy_key,memcpy_gbps,"
          "loop_gbps,ratio_memcpy,ratio_loop,status,case_s,rss_mib,hwm_mib,note").split(",")


def ragged_lengths(dist, n, rng):
    if dist == "mean4":
        return rng.integers(1, 8, size=n)
    if dist == "mean64":
        return rng.integers(1, 128, size=n)
    return 1024 // rng.integers(1, 1025, size=n)  # skewed: 1024/k, k uniform in [1, 1024]


def exact_mask(n, p, rng):
    k = int(round(p * n))
    m = np.zeros(n, dtype=bool)
    m[rng.choice(n, size=k, replace=False)] = True
    return m


class Case:
    """prepare() builds inputs; run() is timed; verify() checks once; payload in bytes."""

    def __init__(self, key, rows, lanes, dtype):
        self.key, self.n, self.lanes, self.dtype = key, rows, lanes, np.dtype(dtype)
        self.rng = np.random.default_rng(0x5EED)
        self.items = rows

    def arrays(self):
        n, w = self.n, self.lanes
        self.src = self.rng.random((n, w)).astype(self.dtype)
        self.dst = np.zeros((n, w), dtype=self.dtype)

    def prepare(self):
        k, n, w = self.key, self.n, self.lanes
        rb = self.dtype.itemsize * w
        if k.startswith("ragged_pack_"):
            lens = ragged_lengths(k[len("ragged_pack_"):], n, self.rng)
            total = int(lens.sum())
            packed = self.rng.random((total, w)).astype(self.dtype)
            offs = np.concatenate(([0], np.cumsum(lens)[:-1]))
            self.rows_list = [packed[o:o + l] for o, l in zip(offs.tolist(), lens.tolist())]
            self.packed = packed
            self.dst = np.empty_like(packed)
            self.payload = total * rb
            return
        if k == "particles_p05":
            return self.prepare_particles()
        self.arrays()
        self.payload = n * rb
        if k == "gather_perm":
            self.perm = self.rng.permutation(n)
        elif k == "gather_scatter_stride4":
            self.idx = np.arange(0, n, 4)
            self.tmp = np.empty((len(self.idx), w), dtype=self.dtype)
            self.payload = len(self.idx) * rb
            self.items = len(self.idx)
        elif k in ("masked_p50", "masked_p05"):
            p = 0.5 if k.endswith("50") else 0.05
            self.mask = exact_mask(n, p, self.rng)
            self.mask2 = self.mask[:, None]
            self.items = int(self.mask.sum())
            self.payload = self.items * rb
        elif k == "scatter_p05":
            self.t = np.flatnonzero(exact_mask(n, 0.05, self.rng))
            self.src = self.src[:len(self.t)].copy()
            self.items = len(self.t)
            self.payload = self.items * rb
        elif k == "scan_gather_p05":
            ch = exact_mask(n, 0.05, self.rng)
            self.changed_at = np.where(ch, 2, 1).astype(np.uint64)
            self.items = int(ch.sum())
            self.payload = self.items * rb
        elif k != "copy":
            raise ValueError("unknown numpy key " + k)

    def prepare_particles(self):
        n = self.n
        m = max(1, n * 5 // 100)
        f = np.float32
        self.m = m
        self.pos, self.vel = self.rng.random((n, 3)).astype(f), self.rng.random((n, 3)).astype(f)
        self.pos_col, self.vel_col = np.zeros((n, 3), f), np.zeros((n, 3), f)
        self.mask_a = exact_mask(n, m / n, self.rng)[:, None]
        self.moved_a = np.flatnonzero(self.mask_a[:, 0])
        chosen = self.rng.choice(n, size=m, replace=False)
        self.sorted_b = np.sort(chosen)
        slot = np.empty(n, dtype=np.int64)
        slot[chosen] = np.arange(m)
        self.index_map = slot[self.sorted_b]
        self.pos_out, self.vel_out = self.rng.random((m, 3)).astype(f), self.rng.random((m, 3)).astype(f)
        self.payload = 6 * m * 12
        self.items = 2

    def run(self):
        k = self.key
        if k == "copy":
            np.copyto(self.dst, self.src)
        elif k == "gather_perm":
            np.take(self.src, self.perm, axis=0, out=self.dst)
        elif k == "gather_scatter_stride4":
            np.take(self.src, self.idx, axis=0, out=self.tmp)
            if self.lanes == 1:
                np.put(self.dst, self.idx, self.tmp)
            else:
                self.dst[self.idx] = self.tmp
        elif k in ("masked_p50", "masked_p05"):
            np.copyto(self.dst, self.src, where=self.mask2)
        elif k == "scatter_p05":
            if self.lanes == 1:
                np.put(self.dst, self.t, self.src)
            else:
                self.dst[self.t] = self.src
        elif k == "scan_gather_p05":
            self.out = np.take(self.src, np.flatnonzero(self.changed_at == 2), axis=0)
        elif k.startswith("ragged_pack_"):
            np.concatenate(self.rows_list, axis=0, out=self.dst)
        elif k == "particles_p05":
            np.copyto(self.pos_col, self.pos, where=self.mask_a)
            np.copyto(self.vel_col, self.vel, where=self.mask_a)
            self.read_a = np.take(self.pos_col, self.moved_a, axis=0)
            self.pos_col[self.sorted_b] = np.take(self.pos_out, self.index_map, axis=0)
            self.vel_col[self.sorted_b] = np.take(self.vel_out, self.index_map, axis=0)
            self.read_b = np.take(self.pos_col, self.sorted_b, axis=0)

    def verify(self):
        k = self.key
        if k == "copy":
            ok = np.array_equal(self.dst, self.src)
        elif k == "gather_perm":
            ok = np.array_equal(self.dst, self.src[self.perm])
        elif k == "gather_scatter_stride4":
            ok = np.array_equal(self.dst[::4], self.src[::4]) and (self.n < 2 or not self.dst[1::4].any())
        elif k in ("masked_p50", "masked_p05"):
            ok = np.array_equal(self.dst[self.mask], self.src[self.mask]) and not self.dst[~self.mask].any()
        elif k == "scatter_p05":
            ok = np.array_equal(self.dst[self.t], self.src)
        elif k == "scan_gather_p05":
            ok = len(self.out) == self.items
        elif k.startswith("ragged_pack_"):
            ok = np.array_equal(self.dst, self.packed)
        else:  # particles
            ok = (np.array_equal(self.read_b, self.pos_out[self.index_map])
                  and len(self.read_a) == len(self.moved_a))
        return "" if ok else "numpy result differs"


def measure(case, warmup, min_reps, max_reps, target):
    t_case = time.perf_counter()
    case.prepare()
    t0 = time.perf_counter()
    case.run()
    first = time.perf_counter() - t0
    bad = case.verify()
    if bad:
        return None, bad, time.perf_counter() - t_case
    for _ in range(1, warmup):
        t0 = time.perf_counter()
        case.run()
        first = min(first, time.perf_counter() - t0)
    inner = 1
    if first < 20e-6:
        inner = int(min(10000, math.ceil(20e-6 / max(first, 1e-9))))
    reps = int(min(max(math.ceil(target / max(first * inner, 1e-9)), min_reps), max_reps))
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(inner):
            case.run()
        times.append((time.perf_counter() - t0) / inner)
    times.sort()
    med = times[len(times) // 2] if len(times) % 2 else 0.5 * (times[len(times) // 2 - 1] + times[len(times) // 2])
    return (reps, inner, med, times[0], times[-1]), "", time.perf_counter() - t_case


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results_dir")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true")
    g.add_argument("--smoke", action="store_true")
    ap.add_argument("--mem-cap-gib", type=float, default=6.0)
    a = ap.parse_args()
    mode = "quick" if a.quick else "smoke" if a.smoke else "full"
    warmup, min_reps, max_reps, target = {"quick": (1, 3, 25, 0.03), "smoke": (0, 1, 1, 0.0),
                                          "full": (2, 5, 50, 0.15)}[mode]
    plan_path = os.path.join(a.results_dir, "numpy_plan.csv")
    with open(plan_path, newline="") as f:
        plan = list(csv.DictReader(f))
    out_path = os.path.join(a.results_dir, "numpy.csv")
    t_all = time.perf_counter()
    failed = 0
    with open(out_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=HEADER)
        w.writeheader()
        for p in plan:
            key, rows, lanes, dtype = p["key"], int(p["rows"]), int(p["lanes"]), p["dtype"]
            row = dict.fromkeys(HEADER, "")
            itemsize = 4 if dtype == "float32" else 8
            row.update(mode=mode, workload=key, family="baseline", impl="numpy", exec="serial", rows=rows,
                       lanes=lanes, dtype=dtype, row_bytes=itemsize * lanes, params=p.get("params", ""),
                       numpy_key=key, rate_unit="ticks/s" if key.startswith("particles") else "rows/s")
            est = 3.0 * rows * itemsize * lanes * (64 if "mean64" in key else 8 if "ragged" in key else 1)
            if est > a.mem_cap_gib * 2 ** 30:
                row.update(status="skipped", note="working set above the cap")
                w.writerow(row)
                continue
            case = Case(key, rows, lanes, dtype)
            try:
                res, bad, case_s = measure(case, warmup, min_reps, max_reps, target)
            except MemoryError:
                res, bad, case_s = None, "out of memory", 0.0
            row["case_s"] = "%.6g" % case_s
            if res is None:
                failed += 1
                row.update(status="verify-failed", note=bad)
                print("  numpy:%-28s %9d %sx%-2d  FAILED: %s" % (key, rows, dtype, lanes, bad))
            else:
                reps, inner, med, mn, mx = res
                gbps = case.payload / med / 1e9
                row.update(payload_bytes=case.payload, items=case.items, reps=reps, inner=inner,
                           median_s="%.6g" % med, min_s="%.6g" % mn, max_s="%.6g" % mx,
                           gbps="%.6g" % gbps, rate="%.6g" % (case.items / med), status="ok")
                print("  numpy:%-28s %9d %s x%-2d %8.3f GB/s %12.3f us" % (key, rows, dtype, lanes, gbps, med * 1e6))
            w.writerow(row)
            f.flush()
            del case
    print("numpy_baseline: %d cases in %.1f s (numpy %s) -> %s" % (len(plan), time.perf_counter() - t_all,
                                                                   np.__version__, out_path))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
