"""Subprocess management for integration tests.

Readiness is always signalled by the child itself: we wait (with a deadline)
for a line it prints on stdout, never for a fixed amount of time.  stdout is
drained continuously by a reader thread (so a chatty child never blocks on a
full pipe) and mirrored to a log file; stderr goes straight to a file whose
tail is attached to failures.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def tail_of_file(path: Path | str | None, lines: int = 60) -> str:
    if path is None:
        return ""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"
    text = strip_ansi(data[-64 * 1024:].decode("utf-8", "replace"))
    return "\n".join(text.splitlines()[-lines:])


class ProcessError(AssertionError):
    """A managed process failed to start, died, or missed a deadline."""


class ManagedProcess:
    """A child process with a stdout line reader and a stderr log file.

    Use as a context manager, or call :meth:`stop` in a ``finally``.
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log_dir: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | str | None = None,
    ) -> None:
        self.name = name
        self.argv = [str(a) for a in argv]
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.stdout_path = self.log_dir / f"{name}.stdout.log"
        self.stderr_path = self.log_dir / f"{name}.stderr.log"
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None
        self._lines: list[str] = []
        self._eof = False
        self._cond = threading.Condition()
        self._reader: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------
    def start(self) -> "ManagedProcess":
        stderr_f = open(self.stderr_path, "wb")
        try:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=stderr_f,
                env=self.env,
                cwd=self.cwd,
                # Own process group: a SIGINT to pytest does not hit the
                # child first, and we can signal the child's whole group.
                start_new_session=True,
            )
        finally:
            stderr_f.close()  # the child holds its own descriptor
        self._reader = threading.Thread(
            target=self._read_stdout, name=f"{self.name}-stdout", daemon=True
        )
        self._reader.start()
        return self

    def _read_stdout(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        with open(self.stdout_path, "wb") as log:
            for raw in iter(self.proc.stdout.readline, b""):
                log.write(raw)
                log.flush()
                line = strip_ansi(raw.decode("utf-8", "replace")).rstrip("\r\n")
                with self._cond:
                    self._lines.append(line)
                    self._cond.notify_all()
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def stdout_lines(self) -> list[str]:
        with self._cond:
            return list(self._lines)

    # -- waiting -------------------------------------------------------------
    def wait_for_line(
        self,
        match: str | re.Pattern[str] | Callable[[str], bool],
        timeout: float,
        *,
        start_index: int = 0,
    ) -> tuple[int, str]:
        """Wait until a stdout line matches; return ``(index, line)``.

        ``match`` is a regex (searched), or a predicate.  Raises
        :class:`ProcessError` (with the stderr tail) if the process exits
        first or the deadline passes.
        """
        if callable(match) and not isinstance(match, re.Pattern):
            pred = match
        else:
            rx = re.compile(match) if isinstance(match, str) else match
            pred = lambda line: rx.search(line) is not None  # noqa: E731
        deadline = time.monotonic() + timeout
        i = start_index
        with self._cond:
            while True:
                while i < len(self._lines):
                    if pred(self._lines[i]):
                        return i, self._lines[i]
                    i += 1
                if self._eof:
                    # stdout closed: the process is exiting; give it a moment
                    # to be reaped so the exit code is in the message.
                    self._cond.release()
                    try:
                        try:
                            assert self.proc is not None
                            self.proc.wait(timeout=5)
                        except subprocess.TimeoutExpired:
                            pass
                    finally:
                        self._cond.acquire()
                    raise ProcessError(self.describe_failure(
                        f"{self.name} closed stdout (exit code {self.returncode}) "
                        f"before printing a line matching {match!r}"))
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise ProcessError(self.describe_failure(
                        f"{self.name} did not print a line matching {match!r} "
                        f"within {timeout:.0f}s"))
                self._cond.wait(remaining)

    def wait_exit(self, timeout: float) -> int:
        assert self.proc is not None
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise ProcessError(self.describe_failure(
                f"{self.name} did not exit within {timeout:.0f}s")) from None
        if self._reader is not None:
            self._reader.join(timeout=5)
        return rc

    # -- stopping ------------------------------------------------------------
    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM, wait up to ``timeout``, then SIGKILL; always reaps.

        Returns the exit code (negative for death by signal).
        """
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self._cleanup()
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                # Only the group we created for this child (start_new_session).
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                try:
                    self.proc.kill()
                except ProcessLookupError:
                    pass
        self.proc.wait()
        self._cleanup()

    def _cleanup(self) -> None:
        if self._reader is not None:
            self._reader.join(timeout=5)
        if self.proc is not None and self.proc.stdout is not None:
            try:
                self.proc.stdout.close()
            except OSError:
                pass

    def __enter__(self) -> "ManagedProcess":
        if self.proc is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- diagnostics ---------------------------------------------------------
    def stderr_tail(self, lines: int = 60) -> str:
        return tail_of_file(self.stderr_path, lines)

    def stdout_tail(self, lines: int = 30) -> str:
        return "\n".join(self.stdout_lines[-lines:])

    def describe_failure(self, headline: str) -> str:
        return (
            f"{headline}\n"
            f"command: {' '.join(self.argv)}\n"
            f"--- {self.name} stdout (tail) ---\n{self.stdout_tail()}\n"
            f"--- {self.name} stderr (tail, {self.stderr_path}) ---\n{self.stderr_tail()}"
        )


def run_tool(
    argv: Sequence[str],
    *,
    timeout: float,
    input: bytes | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[bytes]:
    """Run a short-lived command with a hard deadline; on failure, raise with
    its stdout/stderr in the message."""
    argv = [str(a) for a in argv]
    try:
        cp = subprocess.run(
            argv, input=input, capture_output=True, timeout=timeout,
            env=dict(env) if env is not None else None, cwd=cwd,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        raise ProcessError(
            f"command timed out after {timeout}s: {' '.join(argv)}\n"
            f"--- stdout ---\n{(exc.stdout or b'').decode('utf-8', 'replace')[-4000:]}\n"
            f"--- stderr ---\n{(exc.stderr or b'').decode('utf-8', 'replace')[-4000:]}"
        ) from None
    if check and cp.returncode != 0:
        raise ProcessError(
            f"command failed with exit code {cp.returncode}: {' '.join(argv)}\n"
            f"--- stdout ---\n{cp.stdout.decode('utf-8', 'replace')[-4000:]}\n"
            f"--- stderr ---\n{cp.stderr.decode('utf-8', 'replace')[-4000:]}"
        )
    return cp


def wait_until(
    condition: Callable[[], object],
    timeout: float,
    *,
    interval: float = 0.05,
    message: str | Callable[[], str] = "condition",
) -> object:
    """Poll ``condition`` until it returns a truthy value (which is returned)
    or ``timeout`` passes (AssertionError).  Exceptions from ``condition``
    count as "not yet" and the last one is reported."""
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        try:
            value = condition()
        except Exception as exc:  # noqa: BLE001 - reported below
            last_exc = exc
            value = None
        if value:
            return value
        if time.monotonic() >= deadline:
            msg = message() if callable(message) else message
            detail = f" (last error: {last_exc!r})" if last_exc else ""
            raise AssertionError(f"timed out after {timeout}s waiting for {msg}{detail}")
        time.sleep(interval)
