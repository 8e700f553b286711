# SPDX-License-Identifier: Apache-2.0
"""Reproducers of what ADIOS2's BP5 reader alone does with damaged files -- WHAT THE MANIFEST
CHECK PREVENTS (docs/adios2.md, "What ADIOS2 alone does with damaged files").

    python adios2_damage_reproducers.py <kstage_test_adios2_sample> <kstage_test_adios2_restart> <work dir>

Writes a real kstage checkpoint (sample_checkpoint.c), makes three damaged copies, and reads each
twice, each read in a child process bounded in time:
  - with ADIOS2 alone (its Python FileReader, every variable): reported, not asserted -- with
    ADIOS2 2.12 a byte of mmd.0 set to 0xff crashes it (SIGSEGV in its metadata parser), a data.0
    cut in half makes it wait forever in a read retry loop, and a flipped byte inside a value is
    read as a wrong value with no error (BP5 keeps no checksums);
  - with kstage_adios2_restart (restart_checkpoint.c): each must be a clean refusal (KSTAGE_OP_FAILED naming the damaged
    file) in bounded time -- the manifest is checked before ADIOS2 opens anything.
"""
import ctypes
import os
import shutil
import signal
import subprocess
import sys

sample, restart, work = sys.argv[1], sys.argv[2], sys.argv[3]
ADIOS2_BOUND_S = 10   # ADIOS2 alone: longer than any intact read of this file takes
KSTAGE_BOUND_S = 60   # kstage: a refusal reads every file once

shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
original = os.path.join(work, "checkpoint.bp")
subprocess.run([sample, original, "1000"], check=True, capture_output=True, timeout=120)

ADIOS2_CHILD = r"""
import sys, adios2, numpy as np
with adios2.FileReader(sys.argv[1]) as f:
    total = 0.0
    for name in sorted(f.available_variables()):
        v = np.asarray(f.read(name))
        if v.dtype.kind in "fiu":
            total += float(np.nan_to_num(v.astype(np.float64)).sum())
print(repr(total))
"""

env = dict(os.environ, OMP_PROC_BIND="spread", OMP_PLACES="threads")


def run(command, bound):
    """(outcome, detail) of a child bounded in time: 'hang', 'crash (SIGSEGV)', 'error', 'ok'."""
    try:
        p = subprocess.run(command, capture_output=True, text=True, timeout=bound, env=env)
    except subprocess.TimeoutExpired:
        return "hang", f"still running after {bound} s"
    if p.returncode < 0:
        return f"crash ({signal.Signals(-p.returncode).name})", p.stderr[-300:]
    if p.returncode != 0:
        return "error", p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
    return "ok", p.stdout.strip()


intact = run([sys.executable, "-c", ADIOS2_CHILD, original], 60)
assert intact[0] == "ok", intact

# The first position value's bytes in data.0 (the sample's positions are float32 x 3).
import adios2  # noqa: E402  (the venv of setup.sh --adios2)
import numpy as np  # noqa: E402
with adios2.FileReader(original) as f:
    first_value = np.asarray(f.read("kstage/attr/position/values")).reshape(-1)[:1].tobytes()
data = open(os.path.join(original, "data.0"), "rb").read()
value_at = data.find(first_value)
assert value_at >= 0


def set_byte(path, at, value):
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(bytes([value]))


def flip_byte(path, at):
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)[0]
        f.seek(at)
        f.write(bytes([b ^ 0x40]))


damages = [
    ("mmd.0 byte 8 set to 0xff (metadata)", "mmd.0",
     lambda d: set_byte(os.path.join(d, "mmd.0"), 8, 0xFF)),
    ("data.0 cut in half", "data.0",
     lambda d: os.truncate(os.path.join(d, "data.0"), os.path.getsize(os.path.join(d, "data.0")) // 2)),
    ("data.0 one byte of a position value flipped", "data.0",
     lambda d: flip_byte(os.path.join(d, "data.0"), value_at + 2)),
]
failures = []
for what, file, damage in damages:
    copy = os.path.join(work, "damaged.bp")
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(original, copy)
    damage(copy)
    alone, detail = run([sys.executable, "-c", ADIOS2_CHILD, copy], ADIOS2_BOUND_S)
    if alone == "ok":
        alone = "ok, SAME values" if detail == intact[1] else "ok, WRONG values (no error)"
    print(f"{what}:\n  ADIOS2 alone: {alone}")
    outcome, text = run([restart, copy], KSTAGE_BOUND_S)
    said = dict(line.split(" ", 1) for line in text.splitlines() if line.startswith(("STATUS ", "MESSAGE ")))
    refused = outcome == "ok" and said.get("STATUS") == "11" and file in said.get("MESSAGE", "")
    print(f"  kstage_adios2_restart: {'refused (KSTAGE_OP_FAILED): ' + said['MESSAGE'] if refused else outcome + ' ' + text}")
    if not refused:
        failures.append(what)

# Without the manifest (an unsealed folder: nothing is checked before ADIOS2 reads it), a data.0
# cut short is still refused in bounded time: every read the bridge makes fails at once at a
# file's end (ADIOS2's stdio transport) instead of waiting for the missing bytes.
copy = os.path.join(work, "unsealed-cut.bp")
shutil.rmtree(copy, ignore_errors=True)
shutil.copytree(original, copy)
os.remove(os.path.join(copy, "kstage.manifest"))
os.truncate(os.path.join(copy, "data.0"), os.path.getsize(os.path.join(copy, "data.0")) // 2)
outcome, text = run([restart, copy], 20)  # (ADIOS2 alone waits a minute or more)
said = dict(line.split(" ", 1) for line in text.splitlines() if line.startswith(("STATUS ", "MESSAGE ")))
refused = outcome == "ok" and said.get("STATUS") == "11" and "data.0" in said.get("MESSAGE", "")
print("data.0 cut in half, no manifest (unsealed):\n  kstage_adios2_restart: "
      + ("refused (KSTAGE_OP_FAILED): " + said["MESSAGE"] if refused else outcome + " " + text))
if not refused:
    failures.append("data.0 cut in half, no manifest")
assert not failures, f"kstage did not refuse cleanly: {failures}"
print("adios2_damage_reproducers: every damaged copy refused by kstage (the manifest's check, the bounded reads)")
