# SPDX-License-Identifier: Apache-2.0
"""The particles example (examples/c/particles) streaming its ticks over SST to a second process.

    python stream_particles.py <kstage_example_particles> <work dir>

A receiver (--receive) and a sender (--stream) run side by side on loopback, bounded in time.
The receiver rebuilds a stage from a full step and one incremental step per tick, checks each
step's state against the checksum the sender put in it, and ends with the sender's final
checksum. Then a run restarted from a checkpoint streams again: its first step is the whole
restarted state, and the receiver ends where an uninterrupted run does.
"""
import os
import re
import shutil
import subprocess
import sys

program, work = sys.argv[1], sys.argv[2]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
env = dict(os.environ, OMP_PROC_BIND="spread", OMP_PLACES="threads")
common = [program, "-n", "3000", "-t", "12"]
LIMIT = 120  # seconds for a sender and its receiver together


def checksum(out):
    m = re.search(r"checksum\s+([0-9a-f]{16})", out)
    assert m, out
    return m.group(1)


def stream(name, sender_args):
    """Runs a receiver and a sender of stream `name` side by side; returns their outputs."""
    receiver = subprocess.Popen([program, "--receive", name], cwd=work, env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        sender = subprocess.run(sender_args + ["--stream", name], cwd=work, env=env, text=True,
                                capture_output=True, timeout=LIMIT)
        r_out, r_err = receiver.communicate(timeout=LIMIT)
    finally:
        if receiver.poll() is None:
            receiver.kill()
    assert sender.returncode == 0, "sender: " + sender.stdout + sender.stderr
    assert receiver.returncode == 0, "receiver: " + r_out + r_err
    return sender.stdout, r_out


sent, received = stream("ticks", common)
m = re.search(r"received (\d+) steps \(last at ordinal (\d+)\) of (\d+) particles", received)
assert m and m.groups() == ("13", "13", "3000"), received  # the initial state and 12 ticks
want = checksum(sent)
assert checksum(received) == want, f"receiver ends at {checksum(received)}, the sender at {want}"

# A checkpoint at tick 10, then a run restarted from it streams ticks 11 and 12.
ck = os.path.join(work, "run")
subprocess.run(common[:3] + ["-t", "10", "--checkpoint", ck, "--every", "10"], cwd=work, env=env,
               capture_output=True, text=True, timeout=LIMIT, check=True)
sent, received = stream("restarted", common + ["--restart", ck])
assert "restarted from" in sent and "at tick 11" in sent, sent
m = re.search(r"received (\d+) steps \(last at ordinal (\d+)\)", received)
assert m and m.groups() == ("2", "13"), received  # the whole state after tick 11, then tick 12
assert checksum(sent) == want and checksum(received) == want, (sent, received)
print(f"stream_particles: 13 steps, then 2 after a restart, each checked; final state {want} on both sides")
