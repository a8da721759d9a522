"""One run per workdir: ``lock.json``, taken before anything is written and released at exit.

Why: two ``zhlm-pretrain`` (or ``zhlm-finetune``) runs on one workdir would interleave
``metrics.jsonl`` and checkpoints and leave the second's ``config.json``. The second stops at once
with :class:`WorkdirLocked`, whose one-line message names the holder (command, process id, host,
start time, last heartbeat). A file that a program appends to (``zhlm-predict --output``) is locked
the same way, by ``OUTPUT.lock`` beside it (:func:`hold_output`).

The lock is ``<workdir>/lock.json``: ``command``, ``pid``, ``host`` (and its ``boot`` id),
``started``, ``heartbeat`` (ISO 8601 times) and a random ``token`` that tells this run's lock
from another's. It is created only if absent: locally with ``os.open(O_CREAT | O_EXCL)``; on
cloud storage with fsspec's ``pipe_file(mode="create")``, which gcsfs sends as a GCS upload
with the ``ifGenerationMatch=0`` precondition (other fsspec back-ends may only check, then
write). While held, a thread rewrites ``heartbeat`` every :data:`HEARTBEAT_SECONDS` (30 s).

A lock left behind is taken over with a warning when its holder is gone: on the same host,
its process is not running (or the host has restarted since); on another host, it has sent
no heartbeat for :data:`STALE_AFTER_SECONDS` (5 minutes, ten missed beats). Takeovers go one
at a time through a short-lived guard object (``lock.json.takeover``), so two runs finding
the same stale lock cannot both take it. A holder on another host frozen for longer than the
stale time can lose its lock to a new run; its heartbeat then stops writing and marks the lock
lost, and the run's next :meth:`Held.check` (the loops call it before they write) stops it with
:class:`WorkdirLost`, so that two runs never mix their files; what it saved before is whole. To
clear a lock by hand, delete ``lock.json`` once no run uses the workdir.

Multi-host: the lock is per run. Process 0 takes it and broadcasts the outcome, so every
process of a run proceeds together or stops with process 0's message; only process 0 writes
the lock, its heartbeat and its release.
"""

import contextlib
import datetime
import json
import os
import posixpath
import socket
import threading
import time
import uuid

import jax
import numpy as np
from absl import logging
from jax.experimental import multihost_utils

from zhlm import paths, run_files
from zhlm.errors import UserError

HEARTBEAT_SECONDS = 30.0
STALE_AFTER_SECONDS = 300.0
GUARD_STALE_SECONDS = 60.0  # a takeover takes milliseconds; an older guard was left by a crash
_ATTEMPTS = 5
_MESSAGE_BYTES = 1024  # process 0's refusal as broadcast to the other processes


class WorkdirLocked(UserError, RuntimeError):
    """Another run holds the workdir (or output file), or its lock cannot be read or taken."""


class WorkdirLost(WorkdirLocked):
    """Another run took this run's lock over while it ran: it must stop writing there."""


class _LocalFile:
    """A file on this machine's file system (or a shared mount such as NFS)."""

    def __init__(self, path: str):
        self.path = path

    def create(self, data: bytes) -> bool:
        """Writes ``data`` if no file is there; False if one is. The file appears whole (a
        hard link of a finished temporary file), so a reader never sees it empty or cut."""
        tmp = f"{self.path}.{uuid.uuid4().hex}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        try:
            os.link(tmp, self.path)  # fails if the path exists, as O_EXCL would
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)
        return True

    def read(self) -> bytes | None:
        try:
            with open(self.path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def overwrite(self, data: bytes):
        tmp = f"{self.path}.{uuid.uuid4().hex}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, self.path)  # readers see the old content or the new, never a part

    def remove(self):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


class _RemoteObject:
    """An object in cloud storage (``gs://``) through fsspec (gcsfs)."""

    def __init__(self, url: str):
        import fsspec

        self.fs, self.path = fsspec.core.url_to_fs(url)

    def create(self, data: bytes) -> bool:
        try:
            self.fs.pipe_file(self.path, data, mode="create")  # GCS: ifGenerationMatch=0
        except FileExistsError:
            return False
        return True

    def read(self) -> bytes | None:
        try:
            return self.fs.cat_file(self.path)
        except FileNotFoundError:
            return None

    def overwrite(self, data: bytes):
        self.fs.pipe_file(self.path, data)  # one object write: atomic on GCS

    def remove(self):
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self.path)


def _storage(path: str) -> _LocalFile | _RemoteObject:
    return _RemoteObject(path) if paths.is_remote(path) else _LocalFile(path)


def _now() -> str:
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


def _age(stamp: str) -> float:
    """Seconds since ``stamp`` (an ISO time with its offset); infinite if unreadable."""
    try:
        return time.time() - datetime.datetime.fromisoformat(stamp).timestamp()
    except (TypeError, ValueError):
        return float("inf")


def _decode(data: bytes | None) -> dict | None:
    """The lock's fields; None if there is no lock; ``{}`` if it cannot be read."""
    if data is None:
        return None
    try:
        holder = json.loads(data)
    except ValueError:
        return {}
    return holder if isinstance(holder, dict) else {}


def _pid_running(pid) -> bool:
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    except (TypeError, ValueError, OverflowError):
        return False
    return True


def _boot_id() -> str:
    """This boot of this machine (Linux), so that a process id from before a restart (a
    re-created VM keeping its name) is not taken for a live one; '' where unknown."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def _gone(holder: dict) -> str | None:
    """Why the holder is gone (its lock may be taken over), or None while it may be running."""
    if holder.get("host") == socket.gethostname():
        if holder.get("boot") and _boot_id() and holder["boot"] != _boot_id():
            return f"host {holder['host']} has restarted since"
        if not _pid_running(holder.get("pid")):
            return f"process {holder.get('pid')} is not running"
        return None
    age, stale = _age(holder.get("heartbeat")), STALE_AFTER_SECONDS
    if age > stale:
        return f"no heartbeat for {age / 60:.0f} min (stale after {stale / 60:.0f} min)"
    return None


def _describe(holder: dict) -> str:
    return (
        f"{holder.get('command', 'a run')} (pid {holder.get('pid')} on host "
        f"{holder.get('host')}, started {holder.get('started')}, last heartbeat "
        f"{_age(holder.get('heartbeat')):.0f} s ago)"
    )


class _Lock:
    """The lock file of one workdir as this process holds it."""

    def __init__(self, path: str, command: str, what: str = "", flag: str = "--workdir"):
        """``what`` names what the lock guards in messages (the lock's folder: ``workdir
        DIR``), ``flag`` the command-line flag that picks another."""
        self.path, self.what, self.flag = path, what or f"workdir {posixpath.dirname(path)}", flag
        self.file = _storage(self.path)
        self.guard = _storage(f"{self.path}.takeover")
        self.fields = dict(
            command=command,
            pid=os.getpid(),
            host=socket.gethostname(),
            boot=_boot_id(),
            started=_now(),
            heartbeat=_now(),
            token=uuid.uuid4().hex,
        )
        self._stop = threading.Event()
        self._beating = None
        self.lost = ""  # set by the heartbeat: who took the lock over, when it saw it

    def _data(self) -> bytes:
        return json.dumps(self.fields, indent=1).encode()

    def _mine(self, holder: dict | None) -> bool:
        return bool(holder) and holder.get("token") == self.fields["token"]

    def acquire(self):
        """Takes the lock (a stale one with a warning) or raises :class:`WorkdirLocked`."""
        for _ in range(_ATTEMPTS):
            if self.file.create(self._data()):
                return self._start_heartbeat()
            holder = _decode(self.file.read())
            if holder is None:  # released between the two calls
                continue
            if self._mine(holder):  # a create retried after its reply was lost (GCS)
                return self._start_heartbeat()
            if holder == {}:
                raise WorkdirLocked(
                    f"{self.path} cannot be read: if no run uses {self.what}, delete it"
                )
            reason = _gone(holder)
            if reason is None:
                raise WorkdirLocked(
                    f"{self.what} is in use by {_describe(holder)}: wait for it to finish or "
                    f"stop it, or pick another {self.flag}"
                )
            if self._take_over(holder, reason):
                return self._start_heartbeat()
            time.sleep(0.2)  # another run is taking it over, or it changed: look again
        raise WorkdirLocked(
            f"{self.path} changed {_ATTEMPTS} times while being taken: is another run "
            f"starting on {self.what}? Wait for it, or pick another {self.flag}"
        )

    def _take_over(self, holder: dict, reason: str) -> bool:
        """Replaces ``holder``'s lock by this one, unless another run got there first."""
        if not self.guard.create(self._data()):
            guard = _decode(self.guard.read())
            if guard is not None and _age(guard.get("heartbeat")) > GUARD_STALE_SECONDS:
                self.guard.remove()
            return False
        try:
            if _decode(self.file.read()) != holder:  # taken, released or refreshed meanwhile
                return False
            self.file.remove()
            taken = self.file.create(self._data())
        finally:
            self.guard.remove()
        if taken:
            logging.warning(
                "taking over the lock of %s left by %s: %s",
                self.what,
                _describe(holder),
                reason,
            )
        return taken

    def _start_heartbeat(self):
        self._beating = threading.Thread(target=self._beat, name="zhlm-lock-heartbeat")
        self._beating.daemon = True
        self._beating.start()

    def _beat(self):
        while not self._stop.wait(HEARTBEAT_SECONDS):
            try:
                holder = _decode(self.file.read())
                if not self._mine(holder):
                    self.lost = _describe(holder) if holder else "a run that has since let it go"
                    return  # never write over the new holder's lock
                self.fields["heartbeat"] = _now()
                self.file.overwrite(self._data())
            except Exception as e:  # storage unavailable for a while: try again next beat
                logging.warning("could not refresh the lock %s: %s", self.path, e)

    def release(self):
        self._stop.set()
        if self._beating is not None:
            self._beating.join()
        holder = _decode(self.file.read())
        if self._mine(holder):
            self.file.remove()
        elif holder is not None and not self.lost:  # a lost lock was reported by check()
            logging.warning("%s now belongs to %s: left in place", self.path, _describe(holder))


class Held:
    """The lock as the run that holds it sees it (what :func:`hold` yields)."""

    def __init__(self, workdir, lock: _Lock | None):
        self.workdir, self._lock = workdir, lock

    def check(self) -> None:
        """Raises :class:`WorkdirLost`, one line, once another run has taken this run's lock
        over (the heartbeat saw it). Cheap on one process; a multi-process run agrees on process
        0's answer, so every process must call it at the same point."""
        lost = self._lock.lost if self._lock is not None else ""
        refusal = ""
        if lost:
            refusal = (
                f"workdir {self.workdir} was taken over by {lost} while this run held it (its "
                f"heartbeat was late by over {STALE_AFTER_SECONDS / 60:.0f} min): stopped so "
                "that the two runs do not mix their files, what was saved is whole; stop one "
                "run, then run the same command again to continue"
            )
        refusal = _agree(refusal)
        if refusal:
            raise WorkdirLost(refusal)


def _agree(refusal: str) -> str:
    """Process 0's refusal ('' when it holds the lock), the same on every process."""
    if jax.process_count() == 1:
        return refusal
    message = np.zeros(_MESSAGE_BYTES, np.uint8)
    encoded = refusal.encode()[:_MESSAGE_BYTES]
    message[: len(encoded)] = np.frombuffer(encoded, np.uint8)
    message = np.asarray(multihost_utils.broadcast_one_to_all(message))
    return bytes(message).rstrip(b"\0").decode(errors="replace")


def _not_a_folder(workdir) -> str:
    """Why a local ``workdir`` cannot be a folder (it, or a folder above it, is a file), or ""."""
    if paths.is_remote(workdir):
        return ""
    path = os.path.abspath(os.fspath(workdir))
    while path and not os.path.exists(path):
        path = os.path.dirname(path)
    if not path or os.path.isdir(path):
        return ""
    where = "is a file" if path == os.path.abspath(os.fspath(workdir)) else f"is in {path}, a file"
    return f"--workdir {workdir} {where}, not a folder: give a folder (new or existing)"


def hold(workdir, command: str):
    """Holds ``workdir``'s lock for the ``with`` block (``command`` names this run in it),
    yielding a :class:`Held` whose ``check()`` the loop calls before it writes.

    Raises :class:`WorkdirLocked` on every process while another run holds it; call after
    ``jax.distributed.initialize`` and before anything is written into the workdir.
    """

    def lock() -> _Lock:
        root = paths.resolve(workdir)  # local, or gs:// (see zhlm.paths)
        root.mkdir(parents=True, exist_ok=True)
        return _Lock(os.fspath(root / run_files.LOCK), command)

    def cannot(error) -> str:
        return f"cannot lock {workdir} ({error}): check that it is writable"

    return _held(workdir, lock, cannot, _not_a_folder)


def hold_output(output, command: str):
    """Holds the lock of the file ``output`` (``OUTPUT.lock`` beside it) for the ``with``
    block, as :func:`hold` a workdir's: two programs appending to one file would interleave
    their lines, so the second stops at once naming the first."""

    def lock() -> _Lock:
        path = paths.resolve(output)
        path.parent.mkdir(parents=True, exist_ok=True)
        return _Lock(f"{os.fspath(path)}.lock", command, f"output {output}", "--output")

    def cannot(error) -> str:
        return f"cannot write {output} ({error.strerror or error}): choose a writable --output"

    return _held(output, lock, cannot)


@contextlib.contextmanager
def _held(where, make_lock, cannot, refuse=lambda where: ""):
    """The lock ``make_lock()`` makes for ``where``, held for the ``with`` block (yielding its
    :class:`Held`); ``cannot(error)`` is the refusal where the lock cannot be written,
    ``refuse(where)`` one found before trying (or "")."""
    lock, refusal, cause = None, "", None
    if jax.process_index() == 0:
        refusal = refuse(where)
    if jax.process_index() == 0 and not refusal:
        try:
            lock = make_lock()
            lock.acquire()
        except (WorkdirLocked, OSError) as e:
            lock, cause = None, e
            refusal = str(e) if isinstance(e, WorkdirLocked) else cannot(e)
    refusal = _agree(refusal)
    if refusal:
        prefix = "" if jax.process_index() == 0 else "process 0: "
        raise WorkdirLocked(prefix + refusal) from cause
    try:
        yield Held(where, lock)
    finally:
        if lock is not None:
            lock.release()
