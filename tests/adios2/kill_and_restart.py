# SPDX-License-Identifier: Apache-2.0
"""Checkpoint and restart of the particles example (examples/c/particles) across SIGKILLs.

    python kill_and_restart.py <kstage_example_particles> <work dir> [trials]

An uninterrupted run gives the final state's checksum. Runs that checkpoint every 5 ticks with
kstage_adios2_checkpoint_latest are then killed with SIGKILL at random instants -- between
checkpoints and in the middle of writing one (the seed is printed: KSTAGE_KILL_SEED repeats a
run); one trial in four at any instant of the run, the others after it announced its first
checkpoint, so that how fast the machine runs it cannot make restarts rare; a run that ends
before its kill is run again, killed earlier -- and each is restarted with kstage_adios2_restart_latest from the checkpoint its pointer
names: the restart must start right after the last checkpoint the killed run announced (or the
one it was completing when killed) and end exactly where the uninterrupted run does. A run
killed before its first checkpoint has no pointer: its restart is refused, naming it.
"""
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

program, work = sys.argv[1], sys.argv[2]
trials = int(sys.argv[3]) if len(sys.argv) > 3 else 16
seed = int(os.environ.get("KSTAGE_KILL_SEED", random.randrange(1 << 30)))
rng = random.Random(seed)
print(f"kill_and_restart: seed {seed}")
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
env = dict(os.environ, OMP_PROC_BIND="spread", OMP_PLACES="threads")
ticks, every, tick_ms = 40, 5, 20
# Enough particles that a checkpoint's write takes a fair share of the run (kills land inside it).
common = [program, "-n", "200000", "-t", str(ticks)]


def checksum(out):
    m = re.search(r"checksum\s+([0-9a-f]{16})", out)
    assert m, out
    return m.group(1)


whole = subprocess.run(common, capture_output=True, text=True, env=env, timeout=120, check=True)
want = checksum(whole.stdout)
# How long a checkpointing run takes, for the instants to kill at.
started = time.monotonic()
subprocess.run(common + ["--checkpoint", os.path.join(work, "timing"), "--every", str(every),
                         "--tick-ms", str(tick_ms)],
               capture_output=True, text=True, env=env, timeout=120, check=True)
duration = time.monotonic() - started


def run_and_kill(ck, after_first_checkpoint):
    """Starts a checkpointing run and kills it: at a random instant of the whole run, or (which
    the run's speed on a loaded machine cannot make rare) at a random instant after it announced
    its first checkpoint. Returns (returncode, stdout, seconds it ran)."""
    proc = subprocess.Popen(common + ["--checkpoint", ck, "--every", str(every),
                                      "--tick-ms", str(tick_ms)],
                            stdout=subprocess.PIPE, text=True, env=env)
    started = time.monotonic()
    lines, first = [], threading.Event()

    def read():  # the run flushes each announcement: they arrive as it makes them
        for line in proc.stdout:
            lines.append(line)
            if "checkpoint at tick" in line:
                first.set()
        first.set()  # (the run ended)

    reader = threading.Thread(target=read)
    reader.start()
    if after_first_checkpoint:
        first.wait(timeout=120)
        left = max(0.0, duration * 0.9 - (time.monotonic() - started))
        time.sleep(rng.uniform(0.0, left))
    else:
        time.sleep(rng.uniform(0.0, duration * 0.9))
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    reader.join(timeout=30)
    return proc.returncode, "".join(lines), time.monotonic() - started


outcomes = {"restarted": 0, "no checkpoint yet": 0, "killed inside a checkpoint's write": 0,
            "finished before the kill (run again)": 0}
trial = 0
while trial < trials:
    ck = os.path.join(work, f"run{trial}")
    # One trial in four at any instant (a kill before the first checkpoint is one of the cases),
    # the others after the first checkpoint: kills land in writes and between them.
    returncode, out, ran = run_and_kill(ck, trial % 4 != 0)
    if returncode == 0:
        # It finished first (the timing run was slower than this one): nothing was interrupted.
        # Kill the next ones earlier, and run this trial again.
        outcomes["finished before the kill (run again)"] += 1
        assert outcomes["finished before the kill (run again)"] <= 4 * trials, outcomes
        duration = min(duration, ran)
        shutil.rmtree(ck + ".0", ignore_errors=True)
        shutil.rmtree(ck + ".1", ignore_errors=True)
        if os.path.exists(ck):
            os.remove(ck)
        continue
    assert returncode == -signal.SIGKILL, returncode
    instant = ran
    announced = [int(t) for t in re.findall(r"checkpoint at tick (\d+)", out)]
    # Killed inside a checkpoint's write: a folder the pointer does not name, not (yet) sealed.
    named = open(ck).read().strip() if os.path.exists(ck) else ""
    for other in (ck + ".0", ck + ".1"):
        if (os.path.basename(other) != named and os.path.isdir(other)
                and not os.path.exists(os.path.join(other, "kstage.manifest"))):
            outcomes["killed inside a checkpoint's write"] += 1
    again = subprocess.run(common + ["--restart", ck, "--checkpoint", ck, "--every", str(every)],
                           capture_output=True, text=True, env=env, timeout=120)
    trial += 1
    if not os.path.exists(ck):
        # Killed before its first checkpoint was named: nothing to restart, refused by name.
        assert not announced, f"trial {trial}: announced {announced} but no pointer"
        assert again.returncode != 0 and "names no checkpoint" in again.stderr, again.stderr
        outcomes["no checkpoint yet"] += 1
        continue
    assert again.returncode == 0, f"trial {trial} (killed at {instant:.3f} s): " + again.stdout + again.stderr
    m = re.search(r"at tick (\d+)", again.stdout)
    assert m, again.stdout
    start = int(m.group(1))
    last = announced[-1] if announced else 0
    # The pointer names the last checkpoint announced, or the next one if the kill came after it
    # was named and before it was announced.
    assert start in (last + 1, last + every + 1), f"trial {trial}: restarted at {start}, announced {announced}"
    got = checksum(again.stdout)
    assert got == want, f"trial {trial}: restarted run ends at {got}, the uninterrupted one at {want}"
    outcomes["restarted"] += 1
    shutil.rmtree(ck + ".0", ignore_errors=True)
    shutil.rmtree(ck + ".1", ignore_errors=True)

# Three trials in four are killed after a checkpoint was named: at least those restart.
assert outcomes["restarted"] >= trials - (trials + 3) // 4, outcomes
print(f"kill_and_restart: {trials} trials (seed {seed}): {outcomes}; every restart ended at {want} as uninterrupted")
