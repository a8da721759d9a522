"""The TFDS dataset: one ``GeneratorBasedBuilder`` for every recipe, written as ArrayRecord.

Why TFDS: ``tfds.data_source`` gives the loader random access to ArrayRecord shards without
TensorFlow, the dataset carries its features, split sizes and metadata (the data config and
the prepare report), and the same builder runs as an Apache Beam pipeline for corpora that do
not fit one machine (``beam_runner``, ``beam_pipeline_options``: :mod:`zhlm.data.beam_options`;
``apache-beam`` is an optional extra).

The dataset is ``zhlm_pretrain/<recipe>_<format>_<max_seq_length>``; each input source
(``--input name=GLOB``; unnamed: ``train``) becomes a split of that name, so the loader can mix
sources with weights and knows each one's size. A record is one ``[F, S]`` int32 array
(``arrays``: the per-token fields, named in order by the metadata's ``fields``) and, for the
sentence-pair formats, the scalar ``sentence_label``; the loader splits ``arrays`` by name.
Packed (``data.pack``, :mod:`zhlm.data.packing`), ``arrays`` has ``segment_ids`` too, and
``instance_starts`` and ``sentence_label`` are ``[K]`` per record; the dataset's name ends in
``_packed``.

The prepare report is the same on both paths: it lands in the dataset's metadata (``report``)
and in ``report.txt`` beside it. Beam workers may be other machines, so there each split's
shard reports are merged inside the pipeline and written beside the dataset, then read back
once the pipeline has run.
"""

import json
import os

import numpy as np
import tensorflow_datasets as tfds
from etils import epath

from zhlm.data import beam_options, pipeline, text
from zhlm.errors import UserError

_BEAM_REPORT = "beam-report-"
# Arrays stored as their raw bytes: TFDS encodes them twice as fast as int64 lists (its
# single-process writer is the serial part of zhlm-prepare) and decodes them as fast, for files
# about 1.8x larger.
_ENCODING = tfds.features.Encoding.BYTES


def builder_config_name(data_config, recipe: str) -> str:
    packed = "_packed" if data_config.pack else ""
    return f"{recipe}_{data_config.format}_{data_config.max_seq_length}{packed}"


class ZhlmPretrain(tfds.core.GeneratorBasedBuilder):
    """Pretraining instances from raw Chinese text (see the module docstring)."""

    VERSION = tfds.core.Version("1.4.0")  # part of zhlm.data.cache's key: bump on any change
    RELEASE_NOTES = {
        "1.0.0": "First release.",
        "1.1.0": "Word ids from jieba's dictionary without its HMM; arrays stored as raw bytes.",
        "1.2.0": "The per-token fields of a record stacked into one array, `arrays`.",
        "1.3.0": "Packed records (data.pack): segment_ids, instance_starts, [K] sentence_label.",
        "1.4.0": "Packing by best-fit over 256 open rows (was first-fit over 64): fewer rows.",
    }

    def __init__(self, *, data_config, recipe, inputs=(), num_processes=1, progress=True, **kw):
        self.data_config = data_config
        self.inputs = tuple(inputs)
        self.num_processes = num_processes
        self.progress = progress
        self.report = text.Report()
        self.shards = []
        config = tfds.core.BuilderConfig(
            name=builder_config_name(data_config, recipe),
            description=f"{recipe}: {data_config.format}, {data_config.max_seq_length} tokens",
        )
        super().__init__(config=config, **kw)

    def _info(self):
        names = pipeline.token_fields(self.data_config)
        shape = (len(names), self.data_config.max_seq_length)
        features = {"arrays": tfds.features.Tensor(shape=shape, dtype=np.int32, encoding=_ENCODING)}
        slot_shape = pipeline.slot_shape(self.data_config)
        for name in pipeline.slot_fields(self.data_config):
            features[name] = (
                tfds.features.Tensor(shape=slot_shape, dtype=np.int32, encoding=_ENCODING)
                if slot_shape
                else tfds.features.Scalar(dtype=np.int32)
            )
        return tfds.core.DatasetInfo(
            builder=self,
            description=__doc__,
            features=tfds.features.FeaturesDict(features),
            metadata=tfds.core.MetadataDict(
                data_config=json.loads(self.data_config.to_json()), fields=list(names)
            ),
        )

    def _split_generators(self, dl_manager):
        if not self.shards:
            self.shards = text.expand_inputs(
                self.inputs, self.report, int(self.data_config.shard_mb * 2**20)
            )
        by_source = {}
        for shard in self.shards:
            by_source.setdefault(shard.source, []).append(shard)
        for name in by_source:
            if not name.isidentifier():
                raise UserError(f"source name {name!r}: use letters, digits and underscores")
        self.info.metadata["sources"] = sorted(by_source)
        return {name: self._generate_examples(name, shards) for name, shards in by_source.items()}

    def _generate_examples(self, split, shards):
        if self._beam_runner_set():
            return self._beam_examples(split, shards)
        return self._local_examples(shards)

    def _beam_runner_set(self) -> bool:
        config = getattr(self, "_download_config", None)
        return bool(config and (config.beam_runner or config.beam_options))

    def _local_examples(self, shards):
        n = min(self.num_processes, len(shards))
        names = pipeline.token_fields(self.data_config)
        for shard, batch in pipeline.run_local(
            shards, self.data_config, n, self.report, self.progress
        ):
            yield from pipeline.examples(shard, batch, names)

    def _beam_examples(self, split, shards):
        """A PTransform of ``(key, example)``; its side branch writes the split's report."""
        import apache_beam as beam

        data_config = self.data_config
        names = pipeline.token_fields(data_config)
        # self.data_dir is TFDS's temporary directory here: the file moves with the dataset.
        report_path = os.fspath(epath.Path(self.data_dir) / f"{_BEAM_REPORT}{split}.json")

        def process(shard):
            batch, report = pipeline.process_shard(shard, data_config)
            for key, n in list(report.counts.items()) + list(report.reasons.items()):
                beam.metrics.Metrics.counter("zhlm", key).inc(n)  # live in the runner's UI
            yield beam.pvalue.TaggedOutput("report", report.to_dict())
            yield from pipeline.examples(shard, batch, names)

        def merge(reports):  # associative: Beam may merge partial merges
            total = text.Report()
            for r in reports:
                total += text.Report.from_dict(r)
            return total.to_dict()

        def write(report):
            epath.Path(report_path).write_text(json.dumps(report))

        @beam.ptransform_fn
        def examples(pbegin):
            out = (
                pbegin
                | "Shards" >> beam.Create(shards)
                | "Process" >> beam.FlatMap(process).with_outputs("report", main="examples")
            )
            _ = out.report | "MergeReports" >> beam.CombineGlobally(merge) | beam.Map(write)
            return out.examples

        return examples()

    def _generate_splits(self, dl_manager, download_config):
        split_infos = super()._generate_splits(dl_manager, download_config)
        if self._beam_runner_set():  # the pipeline has run: collect its reports
            for path in sorted(epath.Path(self.data_dir).glob(f"{_BEAM_REPORT}*.json")):
                self.report += text.Report.from_dict(json.loads(path.read_text()))
                path.unlink()
        self.info.metadata["report"] = self.report.to_dict()
        return split_infos

    def download_and_prepare(self, *, download_config=None, **kwargs):
        self._download_config = download_config
        return super().download_and_prepare(download_config=download_config, **kwargs)


def prepare(
    data_config,
    recipe,
    inputs,
    data_dir,
    num_processes=1,
    beam_runner=None,
    progress=True,
    beam_pipeline_options=None,
):
    """Build the dataset; returns ``(builder, report)``. ``beam_runner`` (e.g. ``"DirectRunner"``)
    or ``beam_pipeline_options`` (TFDS's ``"runner=...,key=value,..."``, see
    :mod:`zhlm.data.beam_options`, checked before any input is read) run it as a Beam pipeline
    instead of local processes."""
    runner, options = beam_options.pipeline_options(
        beam_runner, beam_pipeline_options, inputs, data_dir
    )
    builder = ZhlmPretrain(
        data_config=data_config,
        recipe=recipe,
        inputs=inputs,
        num_processes=num_processes,
        progress=progress,
        data_dir=data_dir,
        file_format="array_record",
    )
    download_config = tfds.download.DownloadConfig(
        beam_runner=runner, beam_options=options, try_download_gcs=False
    )
    try:
        builder.download_and_prepare(download_config=download_config)
    except AssertionError as e:  # TFDS's words for a split without a single example
        if "No examples were yielded" not in str(e):
            raise
        raise UserError(_nothing_came_out(builder.report, inputs)) from None
    if builder.report.counts:
        (epath.Path(builder.data_dir) / "report.txt").write_text(builder.report.format() + "\n")
    return builder, builder.report


def _nothing_came_out(report, inputs) -> str:
    """One message for inputs that gave no sequence: why, by the report's reasons."""
    reasons = ", ".join(f"{k} {v:,}" for k, v in sorted(report.reasons.items())) or "no text"
    first = f"; {report.messages[0]}" if report.messages else ""
    return f"no training sequence came out of {', '.join(map(str, inputs))} ({reasons}){first}"
