"""The folder that `--workers` share: each worker writes the scenarios it remembers there, so any
worker can recompute any run.

Anyone may put files in that folder, so this module trusts nothing it did not write. A scenario
file is `<run id>.scenario.json`, whose first line is `pagedviz-scenario <sha256 of the rest>`;
it is written to a temporary name and renamed into place (atomic), read back only when it is a
regular file under a size bound whose checksum and run id both match, and only such files are
ever pruned. Everything else in the folder (other names, directories, links, junk, huge files)
is ignored. Pruning by several workers at once is safe: a file another worker removed first is
simply gone.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import stat
import time
from pathlib import Path
from typing import Any

MAGIC = b"pagedviz-scenario "
NAME = re.compile(r"^[0-9a-f]{20}\.scenario\.json$")
TMP = re.compile(r"^\.[0-9a-f]{20}\.\d+\.[0-9a-f]{8}\.tmp$")
STALE_TMP_S = 600  # a temporary file this old was left by a writer that died


class SharedFolderError(OSError):
    """The shared folder cannot be written; the message says why."""


class SharedFolder:
    def __init__(self, path: Path, max_files: int, max_bytes: int) -> None:
        self.path, self.max_files, self.max_bytes = path, max_files, max_bytes

    def write(self, run_id: str, scenario: dict[str, Any]) -> None:
        """Store the scenario of `run_id` (atomically), or mark it as recently used; then prune."""
        target = self.path / f"{run_id}.scenario.json"
        try:
            if self.read(run_id) is not None:
                os.utime(target)  # recently used: pruned last
            else:
                body = json.dumps(scenario, sort_keys=True, separators=(",", ":")).encode()
                tmp = self.path / f".{run_id}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
                try:
                    with open(tmp, "xb") as f:
                        f.write(MAGIC + hashlib.sha256(body).hexdigest().encode() + b"\n" + body)
                    os.replace(tmp, target)
                finally:
                    tmp.unlink(missing_ok=True)
        except OSError as e:
            raise SharedFolderError(f"the shared folder cannot be written: {e.strerror or e}") from None
        self.prune()

    def read(self, run_id: str) -> dict[str, Any] | None:
        """The scenario dict another worker wrote for `run_id`, or None (absent, foreign or damaged).
        The caller still checks that the scenario's run id is `run_id`."""
        if not re.fullmatch(r"[0-9a-f]{20}", run_id):
            return None
        raw = self._read_own(self.path / f"{run_id}.scenario.json", self.max_bytes)
        if raw is None:
            return None
        head, _, body = raw.partition(b"\n")
        if head != MAGIC + hashlib.sha256(body).hexdigest().encode():
            return None
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):
            return None
        return data if isinstance(data, dict) else None

    def _read_own(self, path: Path, limit: int) -> bytes | None:
        """The bytes of a regular file (no link, no FIFO, no directory) of at most `limit` bytes."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > limit + 100:
                return None
            with os.fdopen(fd, "rb", closefd=False) as f:
                return f.read(limit + 101)
        except OSError:
            return None
        finally:
            os.close(fd)

    def prune(self) -> None:
        """Remove the least recently used own files past `max_files`, and own temporary files a dead
        writer left; never anything else."""
        files: list[tuple[float, str]] = []
        now = time.time()
        try:
            entries = list(os.scandir(self.path))
        except OSError:
            return
        for entry in entries:
            try:
                if not entry.is_file(follow_symlinks=False):
                    continue
                mtime = entry.stat(follow_symlinks=False).st_mtime
            except OSError:  # removed meanwhile by another worker
                continue
            if NAME.match(entry.name):
                files.append((mtime, entry.name))
            elif TMP.match(entry.name) and now - mtime > STALE_TMP_S:
                (self.path / entry.name).unlink(missing_ok=True)
        if len(files) <= self.max_files:
            return
        files.sort()
        for _, name in files[: len(files) - self.max_files]:
            path = self.path / name
            if self._head_is_own(path):
                with contextlib.suppress(OSError):  # another worker removed it first
                    path.unlink()

    def _head_is_own(self, path: Path) -> bool:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return False
        try:
            return stat.S_ISREG(os.fstat(fd).st_mode) and os.read(fd, len(MAGIC)) == MAGIC
        except OSError:
            return False
        finally:
            os.close(fd)

    def problem(self) -> str | None:
        """Why the folder cannot take a new file now (for /healthz), or None when it can."""
        probe = self.path / f".{'0' * 20}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        try:
            with open(probe, "xb") as f:
                f.write(MAGIC)
            probe.unlink()
        except OSError as e:
            return f"the shared folder {self.path.name!r} cannot be written: {e.strerror or e}"
        return None
