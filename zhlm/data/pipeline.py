"""One shard of raw text to its training instances, and many shards in parallel processes.

Why a pure shard function: the multi-process path (:func:`run_local`) and the Beam path
(:mod:`zhlm.data.builder`) both call :func:`process_shard`, whose output depends only on the
shard and the config (its random draws are seeded by the shard's path and offset, never by the
process), so the two paths write identical datasets.
"""

import collections
import concurrent.futures
import contextlib
import hashlib
import multiprocessing
import os
import random
import sys
import types

import numpy as np

from zhlm import paths
from zhlm.data import annotate, dialogue, instances, packing, text

_ANNOTATORS = {}  # one per process and config (tokenizer, jieba and lexicons load once)


def _annotator(data_config):
    key = data_config.to_json()
    if key not in _ANNOTATORS:
        # Documents are a few sentences: the Rust tokenizer's thread pool costs more than it
        # gives on batches that small (measured: 2 MB took 1.6 s to tokenise with it, 1.1 s
        # without), and the processes already use the cores. A user's explicit setting wins.
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        _ANNOTATORS[key] = annotate.Annotator(data_config)
    return _ANNOTATORS[key]


def reset_annotators():
    """Forgets this process's annotators: the next shard builds its tokenizer, segmenter and
    lexicons again, so each timed run of a benchmark pays for them as a new ``zhlm-prepare``
    run does (modules already imported stay loaded)."""
    _ANNOTATORS.clear()


def _converter(data_config):
    if not data_config.traditional_to_simplified:
        return None
    import opencc

    return opencc.OpenCC("t2s")


def shard_seed(seed: int, shard: text.Shard) -> int:
    """The seed of ``shard``'s draws: from its file's path below its glob's fixed folder (or
    its name), not the whole path, so moving a corpus does not change its dataset."""
    name = shard.name or shard.path.rpartition("/")[2]
    digest = hashlib.sha256(f"{seed}|{name}|{shard.start}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


def shard_key(shard: text.Shard, i: int) -> str:
    return f"{shard.source}|{shard.path}|{shard.start}|{i}"


def process_shard(shard: text.Shard, data_config):
    """``(examples, report)``: the shard's instances as a dict of stacked int32 arrays
    (``[N, S]``, ``sentence_label`` ``[N]``) and what happened to its text."""
    report = text.Report()
    ann = _annotator(data_config)
    seed = shard_seed(data_config.seed, shard)
    py_rng, np_rng = random.Random(seed), np.random.default_rng(seed)
    converter = _converter(data_config)
    tok = ann.tokenizer
    writer = instances.Writer(
        data_config.max_seq_length,
        ann.fields,
        tok.token_to_id("[CLS]"),
        tok.token_to_id("[SEP]"),
        tok.token_to_id("[PAD]"),
    )
    # Dialogue sources become ERNIE's DLM records, with the same fields as the text's.
    source_instances = (
        dialogue.shard_instances if shard.source in data_config.dialogue_sources else _text
    )
    rows = source_instances(shard, data_config, ann, writer, (py_rng, np_rng), converter, report)
    report.count("instances", len(rows))
    if data_config.pack:
        rows = packing.pack(rows, data_config.max_seq_length, writer.pad)
        report.count("packed_rows", len(rows))
    report.count("bytes", _shard_bytes(shard))
    report.per_source[shard.source] = collections.Counter(report.counts)
    return _stack(rows, data_config, ann.fields), report


def _text(shard, data_config, ann, writer, rngs, converter, report):
    """The instances of a text shard in ``data.format``."""
    py_rng, np_rng = rngs
    docs = []
    for lines in text.read_documents(shard, data_config.layout, data_config.jsonl_field, report):
        sentences = text.document_sentences(
            lines, report, data_config.max_sentence_chars, converter
        )
        if sentences is None:
            continue
        doc = ann.document(sentences, np_rng, report)
        if doc is not None:
            docs.append(doc)
            report.count("documents")
    return list(
        instances.shard_instances(
            docs, writer, data_config.format, data_config.short_seq_prob, py_rng, report
        )
    )


def _shard_bytes(shard, size=None):
    """Bytes of ``shard.path`` the shard covers (``size``: the file's, when already known)."""
    size = paths.size(shard.path) if size is None else size
    return (min(shard.end, size) - shard.start) if shard.end >= 0 else size


def example_fields(data_config) -> tuple[str, ...]:
    """Every field of a record: :func:`token_fields`, then :func:`slot_fields`."""
    return token_fields(data_config) + slot_fields(data_config)


def token_fields(data_config) -> tuple[str, ...]:
    """The per-token fields, in the order they are stacked into a record's ``arrays``."""
    names = instances.output_fields(annotate.check_fields(data_config.fields))
    return names + (("segment_ids",) if data_config.pack else ())


def slot_fields(data_config) -> tuple[str, ...]:
    """The fields beside ``arrays``: the scalar ``sentence_label`` of the sentence-pair formats,
    or, packed, ``[K]`` per row (``zhlm.data.packing``)."""
    sentence = ("sentence_label",) if data_config.format in ("segment_pair", "sop") else ()
    return (("instance_starts",) if data_config.pack else ()) + sentence


def slot_shape(data_config) -> tuple[int, ...]:
    """Shape of each slot field in one record: () unpacked, ``(K,)`` packed."""
    return (packing.max_instances(data_config.max_seq_length),) if data_config.pack else ()


def _stack(rows, data_config, fields):
    names = instances.output_fields(fields) + (("segment_ids",) if data_config.pack else ())
    length = data_config.max_seq_length
    if not rows:
        out = {n: np.zeros((0, length), np.int32) for n in names}
    else:
        out = {n: np.stack([r[n] for r in rows]) for n in names}
    for n in slot_fields(data_config):
        shape = (len(rows), *slot_shape(data_config))
        out[n] = np.array([r[n] for r in rows], np.int32).reshape(shape)
    return out


def examples(shard, batch, names):
    """``(key, example)`` pairs of a processed shard, keyed by shard and position. The per-token
    fields ``names`` are one ``[len(names), S]`` array per record: TFDS encodes and serializes
    one feature in 25 us against 61 us for five, and its writer is the serial part of
    ``zhlm-prepare``. The other fields of ``batch`` (:func:`slot_fields`) go beside it."""
    arrays = np.stack([batch[n] for n in names], axis=1)
    slots = {n: v for n, v in batch.items() if n not in names}
    for i in range(len(arrays)):
        example = {"arrays": arrays[i], **{n: v[i] for n, v in slots.items()}}
        yield shard_key(shard, i), example


def _work(args):
    shard, data_config = args
    return shard, *process_shard(shard, data_config)


def run_local(shards, data_config, num_processes: int, report: text.Report, progress=True):
    """Process shards in ``num_processes`` processes (1: in this one); yields
    ``(shard, batch)`` as they finish and merges each shard's report into ``report``."""
    from tqdm import tqdm

    sizes = {path: paths.size(path) for path in {s.path for s in shards}}  # a stat per file
    total = sum(_shard_bytes(s, sizes[s.path]) for s in shards)
    bar = tqdm(total=total, unit="B", unit_scale=True, desc="zhlm-prepare", disable=not progress)
    jobs = [(s, data_config) for s in shards]
    pool = None
    if num_processes <= 1:
        results = map(_work, jobs)
    else:
        # Not fork: the parent may hold JAX/Rust thread pools that fork would break. A fork
        # server is a fresh process that imports only this module. An executor (not
        # multiprocessing.Pool) so that a worker that dies fails the run instead of hanging it.
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload([__name__])
        with _bare_main():  # the executor starts its processes on submit
            pool = concurrent.futures.ProcessPoolExecutor(num_processes, mp_context=context)
            futures = [pool.submit(_work, job) for job in jobs]
        results = (f.result() for f in concurrent.futures.as_completed(futures))
    try:
        for shard, batch, shard_report in results:
            report += shard_report
            bar.update(shard_report.counts["bytes"])  # measured by the worker: no second stat
            bar.set_postfix(instances=report.counts["instances"])
            yield shard, batch
    finally:
        bar.close()
        if pool is not None:
            pool.shutdown(cancel_futures=True)


@contextlib.contextmanager
def _bare_main():
    """Start processes without re-running the caller's ``__main__`` in each of them.

    Forkserver and spawn workers import the parent's main module before their first task (so
    that functions defined there unpickle). Ours need only this module, while a caller's main
    may import JAX and TFDS: measured, that cost each worker 1.1 s of start-up from
    ``tools/bench.py``. Processes read ``sys.modules["__main__"]`` when they start, so while
    they do it is an empty module (one started later would only start slower).
    """
    main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = main
