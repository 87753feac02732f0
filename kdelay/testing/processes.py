"""Child processes of the test-suite: writers to race, stall or kill (live_writer,
stalled_writer, soak_writer), running this checkout's kdelay."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import kdelay


def child_env() -> dict[str, str]:
    """The environment for a child process: this checkout's kdelay first on the path
    (whatever the venv has installed), no KDELAY_ settings of the parent's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KDELAY_")}
    here = os.path.dirname(os.path.dirname(os.path.abspath(kdelay.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([here] + ([env["PYTHONPATH"]]
                                                  if env.get("PYTHONPATH") else []))
    return env


@contextlib.contextmanager
def started(module: str, *args: str, ready: str) -> Iterator[subprocess.Popen]:
    """`python -m module args...` once it has printed a line starting with `ready` (its
    stdout is a text pipe to read on from there); killed if still running, and reaped,
    on leaving."""
    proc = subprocess.Popen([sys.executable, "-m", module, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=child_env())
    assert proc.stdout is not None  # (stdout=PIPE)
    try:
        line = proc.stdout.readline()
        if not line.startswith(ready):
            proc.kill()
            raise AssertionError(f"{module} did not get going: {line!r} "
                                 f"{proc.communicate()[1][-2000:]}")
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def kill_9(proc: subprocess.Popen, acked: set[int]) -> None:
    """SIGKILL `proc` (its stdout a text pipe), then add to `acked` the offsets of the
    `ack <offset>` lines it printed before it died and nobody had read yet."""
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.stdout is not None, "kill_9 reads the process's stdout pipe"
    for line in proc.stdout:
        if line.startswith("ack"):
            acked.add(int(line.split()[1]))
