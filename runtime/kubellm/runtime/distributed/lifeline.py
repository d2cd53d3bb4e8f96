"""Workers do not outlive the process that started them, however it ends (SIGKILL too).

The launcher keeps the write end of a pipe and hands the read end to every worker it
starts. Nothing is ever written: when the launcher's process ends, the kernel closes its
end, and a thread in each worker, blocked in ``read``, sees end-of-file and ends the
worker at once — whatever its main thread is doing (importing torch, loading weights,
waiting in a collective). A pipe, not a parent-death signal: PR_SET_PDEATHSIG fires when
the *thread* that started the child exits, and engines are built from any thread. The
launcher also closes its end when it stops the workers, as a last word to stragglers.

Light on purpose (no torch): the worker starts watching before its heavy imports.
"""
from __future__ import annotations

import os
import sys
import threading

FD_ENV = "KUBELLM_LIFELINE_FD"       # the worker's read end of the pipe
DRIVER_PID_ENV = "KUBELLM_DRIVER_PID"  # the launcher's pid, for the message
EXIT_CODE = 1


class Lifeline:
    """Launcher side: one pipe for all the workers of one launch."""

    def __init__(self):
        self._read_fd, self._write_fd = os.pipe()  # neither is inherited unless passed

    def child_env(self) -> dict[str, str]:
        return {FD_ENV: str(self._read_fd), DRIVER_PID_ENV: str(os.getpid())}

    @property
    def pass_fds(self) -> tuple[int, ...]:
        return (self._read_fd,)

    def started(self) -> None:
        """Every worker holds its copy of the read end: drop ours."""
        self._close("_read_fd")

    def cut(self) -> None:
        """Workers still running see end-of-file and exit."""
        self._close("_read_fd")
        self._close("_write_fd")

    def _close(self, name: str) -> None:
        fd = getattr(self, name)
        if fd is not None:
            setattr(self, name, None)
            os.close(fd)

    def __del__(self):
        self.cut()


def watch_from_environ(env=os.environ) -> bool:
    """Worker side: exit as soon as the launcher is gone. False when not started by our
    launcher (no pipe handed over)."""
    raw = env.get(FD_ENV)
    if not raw:
        return False
    fd, driver = int(raw), env.get(DRIVER_PID_ENV, "?")
    threading.Thread(target=_wait_for_eof, args=(fd, driver), name="kubellm-lifeline",
                     daemon=True).start()
    return True


def _wait_for_eof(fd: int, driver: str) -> None:
    try:
        while os.read(fd, 1):
            pass
    except OSError:
        pass
    try:
        print(f"kubellm worker (pid {os.getpid()}): the process that started it (pid "
              f"{driver}) is gone; exiting", file=sys.stderr, flush=True)
    except Exception:  # stderr may be a pipe nobody reads any more
        pass
    os._exit(EXIT_CODE)
