"""Cloud TPU slices as Cloud TPU names them, and their compile-only devices.

``zhlm-compile`` compiles the pretraining step for a slice nobody has rented yet: libtpu's
compiler runs on any host and ``jax.experimental.topologies`` hands out devices that can be
compiled for but hold no data. This module turns an accelerator type (``v4-32``,
``v5litepod-16``, ``v5p-128``, ``v6e-256``) into such devices and knows each chip's HBM, bf16
peak and bandwidths, so the plan can say what fits and how fast it could run.

Chip facts are Google's (Cloud TPU system architecture pages, retrieved 2026):
  v4   https://cloud.google.com/tpu/docs/v4   275 TFLOP/s bf16, 32 GiB HBM2 at 1200 GB/s,
       2 TensorCores per chip (one JAX device, megacore), 4 chips per host; accelerator type
       v4-N counts TensorCores (N/2 chips); slices 2x2x1 ... 8x16x16, 3D torus when every
       dimension is a multiple of 4.
  v5e  https://cloud.google.com/tpu/docs/v5e  197 TFLOP/s bf16, 16 GB HBM2 at 819 GB/s,
       ICI 400 GB/s per chip (bidirectional), 8 chips per host, one TensorCore; v5litepod-N
       counts chips; slices 1x1, 2x2, 2x4, 4x4, 4x8, 8x8, 8x16, 16x16 (2D torus pod).
  v5p  https://cloud.google.com/tpu/docs/v5p-training  459 TFLOP/s bf16, 95 GB HBM2e at 2765 GB/s,
       ICI 4800 Gbps per chip, megacore like v4 (v5p-N counts TensorCores), 4 chips per host.
  v6e  https://cloud.google.com/tpu/docs/v6e  918 TFLOP/s bf16, 32 GB HBM at 1638 GB/s,
       ICI 800 GB/s per chip (bidirectional), 8 chips per host, v6e-N counts chips.
"GB" on those pages is read as 10^9 bytes (the conservative reading) except v4's GiB.
"""

import dataclasses
import math
import os
import re

from zhlm.errors import UserError

GIB = 2**30


@dataclasses.dataclass(frozen=True)
class Chip:
    """One TPU generation: what a plan needs to know about its chips."""

    generation: str  # the prefix of Cloud TPU accelerator types
    topology_prefix: str  # what libtpu's get_topology_desc calls it
    device_kind: str  # jax Device.device_kind (zhlm.train.metrics.PEAK_FLOPS keys)
    hbm_bytes: float
    peak_flops: float  # bf16 dense, per chip
    hbm_bandwidth: float  # bytes/s per chip
    ici_bandwidth: float  # bytes/s per chip, bidirectional; 0 where the page gives none
    cores_per_chip: int  # what the accelerator type's number counts, per chip
    chips_per_host: int
    dims: int  # 2D (v5e, v6e) or 3D (v4, v5p) slice shapes


CHIPS = {
    "v4": Chip("v4", "v4", "TPU v4", 32 * GIB, 275e12, 1200e9, 0.0, 2, 4, 3),
    "v5litepod": Chip("v5litepod", "v5e", "TPU v5 lite", 16e9, 197e12, 819e9, 400e9, 1, 8, 2),
    "v5p": Chip("v5p", "v5", "TPU v5", 95e9, 459e12, 2765e9, 600e9, 2, 4, 3),
    "v6e": Chip("v6e", "v6e", "TPU v6 lite", 32e9, 918e12, 1638e9, 800e9, 1, 8, 2),
}
ALIASES = {"v5e": "v5litepod", "v6": "v6e"}  # names people type for the same chips

# 2D slice shapes of the v5e and v6e pages, by chip count.
SHAPES_2D = {1: (1, 1), 4: (2, 2), 8: (2, 4), 16: (4, 4), 32: (4, 8), 64: (8, 8)}
SHAPES_2D.update({128: (8, 16), 256: (16, 16)})


@dataclasses.dataclass(frozen=True)
class Slice:
    """An accelerator type resolved: chip, slice shape and how many slices (over DCN)."""

    name: str  # as given, e.g. v5litepod-16
    chip: Chip
    shape: tuple
    num_slices: int = 1

    @property
    def chips_per_slice(self) -> int:
        return math.prod(self.shape)

    @property
    def num_chips(self) -> int:
        return self.chips_per_slice * self.num_slices

    @property
    def topology_name(self) -> str:
        return f"{self.chip.topology_prefix}:{'x'.join(map(str, self.shape))}"


def _shape_3d(chips: int) -> tuple:
    """v4/v5p shapes as the v4 page lists them: 2x2x1, 2x2x2, 2x2x4, 2x4x4, 4x4x4, 4x4x8 ...
    (double the smallest, last-listed dimension); other counts need an explicit shape."""
    power = chips.bit_length() - 1
    if chips < 4 or 2**power != chips:
        raise UserError(f"{chips} chips: give the slice shape, e.g. v4-384:4x4x12")
    shape = [2, 2, 1]
    for _ in range(power - 2):
        small = min(shape)
        i = max(j for j, s in enumerate(shape) if s == small)
        shape[i] *= 2
    return tuple(shape)


def parse(topology: str, num_slices: int = 1) -> Slice:
    """``v4-32``, ``v5litepod-16``, ``v5p-8``, ``v6e-256`` (optionally ``:AxBxC``) -> Slice."""
    m = re.fullmatch(r"([a-z0-9]+)-(\d+)(?::(\d+(?:x\d+)+))?", topology.strip().lower())
    if not m or ALIASES.get(m[1], m[1]) not in CHIPS:
        known = ", ".join(f"{g}-N" for g in CHIPS)
        raise UserError(f"unknown TPU accelerator type {topology!r} (known: {known})")
    chip = CHIPS[ALIASES.get(m[1], m[1])]
    count = int(m[2])
    if count % chip.cores_per_chip:
        raise UserError(f"{topology}: {chip.generation}-N counts TensorCores, N is even")
    chips = count // chip.cores_per_chip
    if m[3]:
        shape = tuple(int(s) for s in m[3].split("x"))
        if math.prod(shape) != chips or len(shape) != chip.dims:
            raise UserError(f"{topology}: shape {m[3]} is not {chips} chips in {chip.dims}D")
    elif chip.dims == 3:
        shape = _shape_3d(chips)
    elif chips in SHAPES_2D:
        shape = SHAPES_2D[chips]
    else:
        raise UserError(f"{topology}: {chip.generation} slices have {sorted(SHAPES_2D)} chips")
    if num_slices < 1:
        raise UserError(f"num_slices={num_slices}: at least 1")
    return Slice(topology, chip, shape, num_slices)


def one_chip(s: Slice) -> Slice:
    """A single chip of the same generation (what each chip computes, without collectives)."""
    return Slice(f"{s.chip.generation}-{s.chip.cores_per_chip}", s.chip, (1,) * s.chip.dims)


def _topology_kwargs(s: Slice) -> dict:
    chip, shape = s.chip, s.shape
    if chip.dims == 3:
        host = (2, 2, 1) if s.chips_per_slice >= 4 else shape
        # A v4/v5p slice whose every side is a multiple of 4 is wired as a 3D torus.
        wrap = (all(d % 4 == 0 for d in shape),) * 3
        extra = {"chip_config_name": "megacore"}
    else:
        host = (2, 4, 1) if s.chips_per_slice >= 8 else shape + (1,)
        wrap = tuple(d == 16 for d in shape) + (False,)  # a full 16-chip side closes the ring
        extra = {}
    return dict(chips_per_host_bounds=host, wrap=wrap, num_slices=s.num_slices, **extra)


def devices(s: Slice) -> list:
    """The slice's compile-only TPU devices, ordered as ``jax.devices()`` orders a real pod's
    (by id: slice by slice). Loads libtpu's compiler; needs no TPU."""
    from jax.experimental import topologies

    # libtpu takes /tmp/libtpu_lockfile for the process that drives a real TPU; compiling
    # drives none, and must not fail because another JAX process on this host holds it.
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    try:
        topo = topologies.get_topology_desc(
            platform="tpu", topology_name=s.topology_name, **_topology_kwargs(s)
        )
    except RuntimeError as e:
        if "not installed" in str(e):
            first = str(e).strip().splitlines()[0]
            raise UserError(f"zhlm-compile needs libtpu: pip install -e '.[tpu]' ({first})") from e
        raise
    return sorted(topo.devices, key=lambda d: d.id)
