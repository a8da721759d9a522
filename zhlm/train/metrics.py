"""What the loop reports: metric lines (JSONL and TensorBoard) and the FLOPs behind MFU.

``metrics.jsonl`` in the workdir holds one JSON object per log or eval step (``step``,
``split``, then the scalars), appended, so a resumed run continues the same file (the lines of
steps after the one it resumed from, which it writes again, are dropped first); TensorBoard
event files (tensorboardX: no TensorFlow needed) sit beside it under ``tensorboard/``. Only
process 0 writes.

MFU uses the standard count (PaLM, appendix B): 6 FLOPs per matmul parameter per token, forward
and backward, plus 12·L·H·S per token for the attention scores and values; the MLM transform
and decoder run only at the P gathered positions, the pooler and sentence head once per
sequence, and shared ALBERT layers count once per application. Remat recomputation is not
counted (it is the hardware FLOPs, not the model FLOPs, that it adds).
"""

import json
import os
import time

from zhlm import paths, run_files

# bf16 dense peak per JAX device (one chip): TPUs from Google's Cloud TPU pages; NVIDIA GPUs from
# NVIDIA's data sheets, dense (half the "with sparsity" figure), SXM boards, keyed by the CUDA
# device name that JAX reports (a PCIe board has another name and a lower peak: not listed).
PEAK_FLOPS = {
    "TPU v4": 275e12,
    "TPU v5 lite": 197e12,
    "TPU v5e": 197e12,
    "TPU v5": 459e12,
    "TPU v5p": 459e12,
    "TPU v6 lite": 918e12,
    "TPU v6e": 918e12,
    "NVIDIA A100-SXM4-40GB": 312e12,
    "NVIDIA A100-SXM4-80GB": 312e12,
    "NVIDIA H100 80GB HBM3": 989.4e12,
    "NVIDIA H200": 989.4e12,
}


def peak_flops(config, device) -> float:
    """``config.train.peak_flops``, else the table's value for the device kind, else 0."""
    return float(config.train.peak_flops) or PEAK_FLOPS.get(device.device_kind, 0.0)


def train_flops_per_sequence(model_config, seq_len: int, predictions: int) -> float:
    """Model FLOPs of one training sequence (forward + backward), see the module docstring."""
    c = model_config
    h, layers = c.hidden_size, c.num_layers
    per_token = layers * (4 * h * h + 2 * h * c.mlp_dim)  # Q, K, V, O and the two FFN matmuls
    if c.embed_dim:
        per_token += c.embed_dim * h  # ALBERT's E -> H projection
    width = c.embed_dim or h
    per_prediction = h * width + width * c.vocab_size  # MLM transform (H->H or H->E), decoder
    if c.span_boundary_head:
        per_prediction += (2 * h + c.sbo_position_dim) * h + h * h + h * c.vocab_size
    per_sequence = h * h + 2 * h if c.sentence_head != "none" else 0  # pooler and 2-way head
    matmul = seq_len * per_token + predictions * per_prediction + per_sequence
    return 6.0 * matmul + 12.0 * layers * h * seq_len * seq_len


class Writer:
    """Appends metric lines to ``metrics.jsonl`` and TensorBoard (process 0 only).

    Cloud storage has no append: there the file's lines are kept and the whole file rewritten,
    at most every ``remote_flush_seconds`` and on ``close`` (the loop closes it on preemption).
    """

    def __init__(
        self,
        workdir: str,
        enabled: bool = True,
        remote_flush_seconds: float = 30.0,
        start_step: int | dict[str, int] | None = None,
    ):
        """``start_step``: the step a resumed run starts from (pretraining), or per split the
        last step it keeps (fine-tuning: each seed's finished epochs; a split not named keeps
        none, so ``{}`` starts the file afresh). Lines of later steps (from the part of an
        earlier run after its last checkpoint) are dropped, so that each step has one line.
        None keeps every line."""
        self.enabled = enabled
        self.path = run_files.path(workdir, run_files.METRICS)
        self._remote = paths.is_remote(self.path)
        self._lines, self._flushed, self._every = [], time.monotonic(), remote_flush_seconds
        self._tb = None
        if not enabled:
            return
        if start_step is not None and self.path.exists():
            self._drop_after(start_step)
        if self._remote and self.path.exists():  # a resumed run continues the same file
            self._lines = self.path.read_text().splitlines(keepends=True)
        from tensorboardX import SummaryWriter

        # A resumed run hides the events of the steps it writes again: TensorBoard shows one
        # run, each step once, as metrics.jsonl does.
        purge = {"purge_step": start_step + 1} if isinstance(start_step, int) and start_step else {}
        self._tb = SummaryWriter(os.fspath(self.path.parent / run_files.TENSORBOARD), **purge)

    def write(self, step: int, split: str, scalars: dict):
        if not self.enabled:
            return
        line = {"step": int(step), "split": split, **{k: float(v) for k, v in scalars.items()}}
        text = json.dumps(line) + "\n"
        if self._remote:
            self._lines.append(text)
            if time.monotonic() - self._flushed >= self._every:
                self._flush()
        else:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(text)
        for key, value in scalars.items():
            self._tb.add_scalar(f"{split}/{key}", float(value), int(step))
        self._tb.flush()

    def _drop_after(self, step):
        """Rewrites the file without the lines of steps after ``step`` (an int, or per split:
        see ``start_step``) and a line cut short by a killed process, when it has any."""

        def kept_line(text):
            if not text.endswith("\n"):
                return False
            line = json.loads(text)
            last = step.get(line["split"], 0) if isinstance(step, dict) else step
            return line["step"] <= last

        lines = self.path.read_text().splitlines(keepends=True)
        kept = [t for t in lines if kept_line(t)]
        if len(kept) < len(lines):
            self.path.write_text("".join(kept))

    def _flush(self):
        self.path.write_text("".join(self._lines))
        self._flushed = time.monotonic()

    def close(self):
        if self._remote and self.enabled:
            self._flush()
        if self._tb is not None:
            self._tb.close()


def read(workdir: str, split: str | None = "train") -> list[dict]:
    """The metric lines of ``split`` (None: every split) in ``workdir``'s metrics.jsonl."""
    path = run_files.path(workdir, run_files.METRICS)
    if not path.exists():
        return []
    lines = map(json.loads, path.read_text().splitlines())
    return [line for line in lines if split is None or line["split"] == split]
