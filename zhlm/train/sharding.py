"""The device mesh and named shardings, declared once by logical axis names.

Parameters carry logical names (``vocab, embed, mlp, heads, ...``, see models/layers.py); the
rules table in ``config.train.logical_rules`` maps them onto the mesh ``data, fsdp, tensor``.
The batch is split over ``('data', 'fsdp')``. Everything that cannot work (a mesh larger than
the machine, a batch the data axes do not divide, heads the tensor axis does not divide) fails
here, before compiling, with the numbers in the message.
"""

import math

import flax.linen as nn
import jax
import numpy as np

from zhlm.errors import UserError

P = jax.sharding.PartitionSpec


def mesh_shape(config, num_devices):
    """Axis names and sizes with the single -1 resolved; a clear error if they do not fit."""
    names = tuple(name for name, _ in config.train.mesh)
    sizes = [size for _, size in config.train.mesh]
    if sizes.count(-1) > 1:
        raise UserError(f"config.train.mesh={config.train.mesh}: at most one axis may be -1")
    fixed = math.prod(s for s in sizes if s != -1)
    if -1 in sizes:
        if num_devices % fixed:
            raise UserError(f"mesh {config.train.mesh} does not divide {num_devices} devices")
        sizes[sizes.index(-1)] = num_devices // fixed
    if math.prod(sizes) != num_devices:
        raise UserError(
            f"mesh {dict(zip(names, sizes, strict=True))} needs {math.prod(sizes)} devices, "
            f"there are {num_devices}"
        )
    return names, tuple(sizes)


def create_mesh(config, devices=None):
    devices = jax.devices() if devices is None else devices
    names, sizes = mesh_shape(config, len(devices))
    return jax.sharding.Mesh(np.asarray(devices).reshape(sizes), names)


def rules(config):
    return tuple((name, axes) for name, axes in config.train.logical_rules)


def data_parallel(mesh) -> int:
    """The devices a batch's rows are split over (data x fsdp)."""
    return mesh.shape["data"] * mesh.shape["fsdp"]


def check_divisibility(config, mesh, model_config):
    """Batch over the data axes and model dims over the tensor axis, before any compile."""
    data = data_parallel(mesh)
    batch = config.train.batch_size // config.train.micro_batches
    if config.train.batch_size % config.train.micro_batches:
        raise UserError(
            f"batch_size {config.train.batch_size} is not divisible by micro_batches "
            f"{config.train.micro_batches}"
        )
    if batch % data:
        raise UserError(f"micro-batch {batch} is not divisible by data x fsdp = {data} devices")
    tensor = mesh.shape["tensor"]
    for what, n in (
        ("heads", model_config.num_heads),
        ("mlp_dim", model_config.mlp_dim),
        ("the padded vocabulary (config.model.vocab_multiple)", model_config.padded_vocab_size),
    ):
        if n % tensor:
            raise UserError(f"{what}={n} is not divisible by the tensor axis ({tensor})")


def logical_shardings(abstract_tree, mesh, config):
    """NamedShardings for a tree whose leaves may carry logical-axis boxes."""
    specs = nn.get_partition_spec(abstract_tree)
    return nn.logical_to_mesh_sharding(specs, mesh, rules(config))


def batch_sharding(mesh):
    """[B, ...] arrays split over the data axes."""
    return jax.sharding.NamedSharding(mesh, P(("data", "fsdp")))


def replicated(mesh):
    return jax.sharding.NamedSharding(mesh, P())
