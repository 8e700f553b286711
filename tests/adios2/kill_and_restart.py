# SPDX-License-Identifier: Apache-2.0
"""Checkpoint and restart of the particles example (examples/c/particles) across a SIGKILL.

    python kill_and_restart.py <kstage_example_particles> <work dir>

An uninterrupted run gives the final state's checksum. A second run checkpoints every 10 ticks
and is killed with SIGKILL between the checkpoints of ticks 20 and 30; a third restarts from its
last checkpoint (tick 20) and runs to the end: its final state must be the uninterrupted run's.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import time

program, work = sys.argv[1], sys.argv[2]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
env = dict(os.environ, OMP_PROC_BIND="spread", OMP_PLACES="threads")
common = [program, "-n", "5000", "-t", "40"]
ck = os.path.join(work, "run")


def checksum(out):
    m = re.search(r"checksum\s+([0-9a-f]{16})", out)
    assert m, out
    return m.group(1)


whole = subprocess.run(common, capture_output=True, text=True, env=env, timeout=120, check=True)
want = checksum(whole.stdout)

killed = subprocess.Popen(common + ["--checkpoint", ck, "--every", "10", "--tick-ms", "40"],
                          stdout=subprocess.PIPE, text=True, env=env)
deadline = time.monotonic() + 60
for line in killed.stdout:
    if "checkpoint at tick 20" in line:
        break
    assert time.monotonic() < deadline, "no checkpoint at tick 20 in time"
time.sleep(0.15)  # a few ticks past it: between the checkpoints of ticks 20 and 30
killed.send_signal(signal.SIGKILL)
killed.wait(timeout=30)
assert killed.returncode == -signal.SIGKILL, killed.returncode
with open(ck) as f:
    named = f.read().strip()
assert named.endswith(".0"), named  # the second checkpoint (tick 20) is the one named

again = subprocess.run(common + ["--restart", ck, "--checkpoint", ck, "--every", "10"],
                       capture_output=True, text=True, env=env, timeout=120)
assert again.returncode == 0, again.stdout + again.stderr
assert "at tick 21" in again.stdout, again.stdout
got = checksum(again.stdout)
assert got == want, f"restarted run ends at {got}, the uninterrupted one at {want}"
print(f"kill_and_restart: killed after the checkpoint of tick 20, restarted, final state {got} as uninterrupted")
