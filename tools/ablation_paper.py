"""The ablations at the papers' scale: the exact commands of every run at base size (the
``paper`` scale trains nothing), and ALBERT Tables 3/4's published parameter counts against ours.
"""

from __future__ import annotations

from ablation_tables import ABLATIONS, ALBERT_PARAMS
from ablations import param_count, pretrain_config, task_files, variant_folder

from zhlm import config_files


def paper_commands(name: str) -> str:
    """The ``paper`` scale: the exact commands of every run of the ablation at base size."""
    ablation = ABLATIONS[name]
    lines = [
        f"### {ablation.title}: commands at the paper's scale",
        "",
        "Each distinct dataset is prepared once from your corpus, then every run goes to a "
        "TPU VM or pod slice (`launch_tpu.sh ... -- <zhlm-pretrain flags>` for pretraining):",
        "",
        "```bash",
    ]
    train = " ".join(f"--config.train.{k}={v}" for k, v in ablation.paper_runs.items())
    prepared = set()
    for variant in ablation.variants:
        folder = variant_folder(variant)
        flags = " ".join(_flag(k, v) for k, v in variant.overrides)
        data_flags = " ".join(_flag(k, v) for k, v in variant.overrides if k.startswith("data."))
        config = pretrain_config(variant, None)
        data = f"gs://BUCKET/data/{variant.recipe}-{config.data.format}"
        if config.data.fields:
            data += "-" + "-".join(f.removesuffix("_ids") for f in config.data.fields)
        inputs = "--input='gs://BUCKET/corpus/*.txt'"
        if config.data.dialogue_sources:
            data += "-dlm"
            inputs = "--input='text=gs://BUCKET/corpus/*.txt' " + " ".join(
                f"--input='{name}=gs://BUCKET/{name}/*.jsonl'"
                for name in config.data.dialogue_sources
            )
        if data not in prepared:
            prepared.add(data)
            lines.append(
                f"zhlm-prepare --config=configs/{variant.recipe}.py:base {data_flags} "
                f"{inputs} --data_dir={data}".replace("  ", " ")
            )
        work = f"gs://BUCKET/{name}/{folder}"
        lines.append(
            f"zhlm-pretrain --config=configs/{variant.recipe}.py:base --workdir={work} "
            f"--config.data.data_dir={data} {train} {flags}".rstrip()
        )
        for task in ablation.tasks:
            files = task_files(task, "$DATA")  # fine-tuning reads local files
            lines.append(
                f"zhlm-finetune --config=configs/finetune/{task}.py --init={work} "
                f"--workdir={work}/{task} --config.train.seeds=10 "
                + " ".join(f"--config.task.{k}={v}" for k, v in files.items() if v)
            )
    lines += [
        "```",
        "",
        "`$DATA`: a local copy of the task files (the layout of this repository's "
        "`../shared/data`). "
        "Base size (L12/H768), the recipe's optimizer and masking, the papers' step counts and "
        "batch sizes; 10 fine-tuning seeds as Chinese-BERT-wwm and MacBERT report (max and "
        "mean). " + ablation.note,
    ]
    return "\n".join(lines)


def _flag(key: str, value) -> str:
    """``--config.KEY=VALUE`` as a shell takes it: tuples quoted as Python literals."""
    if isinstance(value, tuple):
        return f'--config.{key}="{value!r}"'
    return f"--config.{key}={value}"


def albert_params_table() -> str:
    """Every parameter count of ALBERT Tables 3/4 from ``jax.eval_shape`` of our ALBERT-base
    (the full pretraining model, as the paper counts it), with the published figure."""
    lines = [
        "### ALBERT Tables 3/4 parameters (ALBERT-base, L12/H768, 30k vocabulary)",
        "",
        "| sharing | E | paper | ours | difference |",
        "|---|---|---|---|---|",
    ]
    for (share, width), paper in ALBERT_PARAMS.items():
        config = config_files.load("albert", "base")
        config.model.update(vocab_size=30000, share_layers=share)
        config.model.embed_dim = 0 if width == 768 else width  # E=H: no projection
        ours = param_count(config)
        lines.append(
            f"| {share} | {width} | {paper / 1e6:.0f}M | {ours / 1e6:.2f}M "
            f"| {100 * (ours - paper) / paper:+.1f}% |"
        )
    lines += [
        "",
        "The paper rounds to the nearest million. E=768 equals H: no factorisation and no E->H",
        "projection, as in BERT; 'attention' / 'ffn' share only those sublayers across layers.",
    ]
    return "\n".join(lines)
