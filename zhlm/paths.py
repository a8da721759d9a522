"""Paths that are local or on cloud storage (``gs://``): one rule for the whole package.

Why: on Cloud TPU the workdir lives in a bucket that every worker sees and that outlives a
preempted VM (``launch_tpu.sh``). ``open`` and ``os.path`` would quietly turn
``gs://bucket/run`` into ``./gs:/bucket/run`` on the local disk, so everything that touches a
workdir or a checkpoint folder goes through :func:`resolve` and ``etils.epath`` (which orbax
uses too), and so do corpus inputs, which a Beam pipeline on Dataflow reads from a bucket.
Cloud URLs need ``gcsfs``: ``pip install -e '.[gcs]'``, as ``launch_tpu.sh`` does.
"""

import glob
import json
import os

from etils import epath


def is_remote(path) -> bool:
    """A URL (``gs://``, ``s3://`` ...) rather than a local path."""
    return "://" in os.fspath(path)


def resolve(path) -> epath.Path:
    """Local paths expanded and made absolute (orbax requires it); URLs kept as they are."""
    if is_remote(path):
        return epath.Path(path)
    return epath.Path(os.path.abspath(os.path.expanduser(os.fspath(path))))


def glob_files(pattern: str) -> list[str]:
    """Files matching ``pattern`` (``*``, ``?``, ``[...]`` in any component), sorted."""
    if not is_remote(pattern):
        matches = glob.glob(os.path.expanduser(pattern))
        return sorted(p for p in matches if os.path.isfile(p))
    parts = pattern.split("/")
    first = next((i for i, part in enumerate(parts) if any(c in part for c in "*?[")), len(parts))
    root = epath.Path("/".join(parts[:first]))
    matches = root.glob("/".join(parts[first:])) if first < len(parts) else [root]
    return sorted(os.fspath(p) for p in matches if p.is_file())


def fingerprint(path: str) -> tuple:
    """``(size, modification time)`` of a file: what tells a changed input from the same one."""
    if not is_remote(path):
        st = os.stat(path)
        return st.st_size, st.st_mtime_ns
    st = epath.Path(path).stat()
    return st.length, st.mtime


def size(path: str) -> int:
    return fingerprint(path)[0]


def open_binary(path: str):
    """A seekable binary file object, local or remote."""
    return open(path, "rb") if not is_remote(path) else epath.Path(path).open("rb")


def write_json(path, value) -> None:
    """``value`` as UTF-8 JSON at ``path`` (local or ``gs://``)."""
    text = json.dumps(value, ensure_ascii=False, indent=1)
    resolve(path).write_text(text, encoding="utf-8")
