"""What the loop reports: metric lines (JSONL and TensorBoard) and the FLOPs behind MFU.

``metrics.jsonl`` in the workdir holds one JSON object per log or eval step (``step``,
``split``, then the scalars), appended, so a resumed run continues the same file; TensorBoard
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

# bf16 dense peak per JAX device (one chip), from Google's Cloud TPU pages.
PEAK_FLOPS = {
    "TPU v4": 275e12,
    "TPU v5 lite": 197e12,
    "TPU v5e": 197e12,
    "TPU v5": 459e12,
    "TPU v5p": 459e12,
    "TPU v6 lite": 918e12,
    "TPU v6e": 918e12,
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
    """Appends metric lines to ``metrics.jsonl`` and TensorBoard (process 0 only)."""

    def __init__(self, workdir: str, enabled: bool = True):
        self.enabled = enabled
        self.path = os.path.join(workdir, "metrics.jsonl")
        self._tb = None
        if enabled:
            from tensorboardX import SummaryWriter

            self._tb = SummaryWriter(os.path.join(workdir, "tensorboard"))

    def write(self, step: int, split: str, scalars: dict):
        if not self.enabled:
            return
        line = {"step": int(step), "split": split, **{k: float(v) for k, v in scalars.items()}}
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")
        for key, value in scalars.items():
            self._tb.add_scalar(f"{split}/{key}", float(value), int(step))
        self._tb.flush()

    def close(self):
        if self._tb is not None:
            self._tb.close()


def read(workdir: str, split: str = "train") -> list[dict]:
    """The metric lines of ``split`` in ``workdir``'s metrics.jsonl (for tests and tools)."""
    with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
        return [line for line in map(json.loads, f) if line["split"] == split]
