# SPDX-License-Identifier: Apache-2.0
"""The log (kstage.set_log_callback, flush_log, log_message; docs/logging.md): thresholds and
channel filters by name or dict, a refused setting that keeps the previous callback, removal,
serial delivery from many threads with the GIL taken, a callback that raises (its exception goes
to sys.unraisablehook, never into C), a callback that calls kstage, and KSTAGE_LOG on stderr."""
import os
import subprocess
import sys
import textwrap
import threading

import pytest

import kstage
from ks_support import run_python


class Recorder:
    def __init__(self):
        self.got = []
        self.running = 0
        self.most = 0
        self.lock = threading.Lock()

    def __call__(self, severity, channel, message):
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        self.got.append((severity, channel, message))
        with self.lock:
            self.running -= 1


@pytest.fixture
def recorder():
    r = Recorder()
    yield r
    kstage.set_log_callback(None)


def test_threshold_and_channels(recorder):
    kstage.set_log_callback(recorder, level="warning", channels={"device": "debug", "stage": "off"})
    for channel in ("stage", "device", "api"):
        for severity in ("debug", "info", "warning", "error"):
            kstage.log_message(severity, channel, f"{channel} {severity}")
    kstage.flush_log()
    assert [m for _, _, m in recorder.got] == [
        "device debug", "device info", "device warning", "device error", "api warning", "api error"]
    assert recorder.got[0][0] is kstage.LogSeverity.DEBUG
    assert all(isinstance(s, kstage.LogSeverity) for s, _, _ in recorder.got)


def test_filter_string_and_stage_messages(recorder):
    kstage.set_log_callback(recorder, level=kstage.LogSeverity.OFF, channels="stage=debug")
    s = kstage.Stage()
    s.close()
    kstage.flush_log()
    assert [c for _, c, _ in recorder.got] == ["stage", "stage"]
    assert "created" in recorder.got[0][2] and "destroyed" in recorder.got[1][2]


def test_malformed_setting_keeps_the_previous_callback(recorder):
    kstage.set_log_callback(recorder, level="info")
    other = Recorder()
    with pytest.raises(kstage.InvalidArgument, match="entry 'devcie=debug': unknown channel"):
        kstage.set_log_callback(other, channels="devcie=debug")
    with pytest.raises(kstage.InvalidArgument, match="unknown level 'loud'"):
        kstage.set_log_callback(other, channels="device=loud")
    with pytest.raises(kstage.InvalidArgument, match="level 'verbose'"):
        kstage.set_log_callback(other, level="verbose")
    with pytest.raises(kstage.InvalidArgument, match="callable"):
        kstage.set_log_callback(42)
    with pytest.raises(ValueError):  # InvalidArgument is a ValueError
        kstage.log_message("info", "usd", "x")
    kstage.log_message("info", "api", "kept")
    kstage.flush_log()
    assert other.got == []
    assert [m for _, _, m in recorder.got] == ["kept"]


def test_removed_callback_gets_nothing(recorder):
    kstage.set_log_callback(recorder, level="debug")
    kstage.log_message("info", "api", "before")
    kstage.set_log_callback(None)
    kstage.log_message("error", "api", "after")
    kstage.flush_log()
    assert [m for _, _, m in recorder.got] == ["before"]


def test_serial_delivery_from_many_threads(recorder):
    kstage.set_log_callback(recorder, level="debug")

    def emit(t):
        for i in range(200):
            kstage.log_message("info", "api", f"{t}:{i}")

    threads = [threading.Thread(target=emit, args=(t,)) for t in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    kstage.flush_log()
    assert len(recorder.got) == 1200
    assert recorder.most == 1
    for t in range(6):
        mine = [int(m.split(":")[1]) for _, _, m in recorder.got if m.startswith(f"{t}:")]
        assert mine == list(range(200))


def test_a_raising_callback_goes_to_unraisablehook(recorder):
    seen = []
    previous = sys.unraisablehook
    sys.unraisablehook = lambda u: seen.append(u)
    try:
        def boom(severity, channel, message):
            if message == "boom":
                raise RuntimeError("from the callback")
            recorder(severity, channel, message)

        kstage.set_log_callback(boom, level="debug")
        kstage.log_message("info", "api", "boom")
        kstage.log_message("info", "api", "fine")
        kstage.flush_log()
    finally:
        sys.unraisablehook = previous
    assert [m for _, _, m in recorder.got] == ["fine"]
    assert len(seen) == 1 and isinstance(seen[0].exc_value, RuntimeError)


def test_a_callback_may_call_kstage(recorder):
    results = []

    def fn(severity, channel, message):
        recorder(severity, channel, message)
        if message == "first":
            kstage.flush_log()  # returns at once inside the callback
            kstage.log_message("info", "api", "from the callback")
            results.append(kstage.build_info()["kstage"])

    kstage.set_log_callback(fn, level="info")
    kstage.log_message("info", "api", "first")
    kstage.flush_log()
    kstage.flush_log()
    assert [m for _, _, m in recorder.got] == ["first", "from the callback"]
    assert results and results[0] == kstage.__version__


def test_kstage_log_environment_variable():
    code = """
        import kstage
        kstage.log_message("info", "api", "hidden")
        kstage.log_message("warning", "api", "shown")
        kstage.log_message("debug", "device", "device detail")
        kstage.flush_log()
    """
    env = dict(os.environ, KSTAGE_LOG="warning,device=debug")
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(kstage.__file__)))
    env["PYTHONPATH"] = package_parent + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "kstage [warning] api: shown" in proc.stderr
    assert "kstage [debug] device: device detail" in proc.stderr
    assert "hidden" not in proc.stderr


def test_callback_installed_at_exit_is_removed():
    """A callback still installed when the interpreter exits is removed first (atexit)."""
    rc, out = run_python("""
        import kstage
        kstage.set_log_callback(lambda s, c, m: print("got", m, flush=True), level="debug")
        kstage.log_message("info", "api", "one")
        kstage.flush_log()
        kstage.log_message("info", "api", "two")
    """)
    assert rc == 0, out
    assert "got one" in out
