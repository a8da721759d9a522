"""The TFDS dataset: one ``GeneratorBasedBuilder`` for every recipe, written as ArrayRecord.

Why TFDS: ``tfds.data_source`` gives the loader random access to ArrayRecord shards without
TensorFlow, the dataset carries its features, split sizes and metadata (the data config and
the prepare report), and the same builder runs as an Apache Beam pipeline for corpora that do
not fit one machine (``beam_runner``; ``apache-beam`` is an optional extra).

The dataset is ``zhlm_pretrain/<recipe>_<format>_<max_seq_length>``; each input source
(``--input name=GLOB``; unnamed: ``train``) becomes a split of that name, so the loader can mix
sources with weights and knows each one's size. Fields are fixed-length int32 arrays.
"""

import json
import os

import numpy as np
import tensorflow_datasets as tfds

from zhlm.data import pipeline, text


def builder_config_name(data_config, recipe: str) -> str:
    return f"{recipe}_{data_config.format}_{data_config.max_seq_length}"


class ZhlmPretrain(tfds.core.GeneratorBasedBuilder):
    """Pretraining instances from raw Chinese text (see the module docstring)."""

    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "First release."}

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
        length = self.data_config.max_seq_length
        features = {
            name: tfds.features.Tensor(shape=(length,), dtype=np.int32)
            for name in pipeline.example_fields(self.data_config)
            if name != "sentence_label"
        }
        if "sentence_label" in pipeline.example_fields(self.data_config):
            features["sentence_label"] = tfds.features.Scalar(dtype=np.int32)
        return tfds.core.DatasetInfo(
            builder=self,
            description=__doc__,
            features=tfds.features.FeaturesDict(features),
            metadata=tfds.core.MetadataDict(data_config=json.loads(self.data_config.to_json())),
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
                raise ValueError(f"source name {name!r}: use letters, digits and underscores")
        self.info.metadata["sources"] = sorted(by_source)
        return {name: self._generate_examples(shards) for name, shards in by_source.items()}

    def _generate_examples(self, shards):
        if self._beam_runner_set():
            return self._beam_examples(shards)
        return self._local_examples(shards)

    def _beam_runner_set(self) -> bool:
        config = getattr(self, "_download_config", None)
        return bool(config and (config.beam_runner or config.beam_options))

    def _local_examples(self, shards):
        n = min(self.num_processes, len(shards))
        for shard, batch in pipeline.run_local(
            shards, self.data_config, n, self.report, self.progress
        ):
            yield from pipeline.examples(shard, batch)
        self.info.metadata["report"] = {
            "counts": dict(self.report.counts),
            "reasons": dict(self.report.reasons),
            "per_source": {k: dict(v) for k, v in self.report.per_source.items()},
        }

    def _beam_examples(self, shards):
        import apache_beam as beam

        data_config = self.data_config

        def process(shard):
            batch, report = pipeline.process_shard(shard, data_config)
            for key, n in list(report.counts.items()) + list(report.reasons.items()):
                beam.metrics.Metrics.counter("zhlm", key).inc(n)
            yield from pipeline.examples(shard, batch)

        return beam.Create(shards) | beam.FlatMap(process)

    def download_and_prepare(self, *, download_config=None, **kwargs):
        self._download_config = download_config
        return super().download_and_prepare(download_config=download_config, **kwargs)


def prepare(
    data_config, recipe, inputs, data_dir, num_processes=1, beam_runner=None, progress=True
):
    """Build the dataset; returns ``(builder, report)``. ``beam_runner`` (e.g. ``"DirectRunner"``)
    runs it as a Beam pipeline instead of local processes."""
    builder = ZhlmPretrain(
        data_config=data_config,
        recipe=recipe,
        inputs=inputs,
        num_processes=num_processes,
        progress=progress,
        data_dir=data_dir,
        file_format="array_record",
    )
    download_config = tfds.download.DownloadConfig(beam_runner=beam_runner, try_download_gcs=False)
    builder.download_and_prepare(download_config=download_config)
    if builder.report.counts:
        with open(os.path.join(builder.data_dir, "report.txt"), "w", encoding="utf-8") as f:
            f.write(builder.report.format() + "\n")
    return builder, builder.report
