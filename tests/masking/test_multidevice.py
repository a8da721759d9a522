"""Masks are identical on 1 device and on an 8-device CPU mesh (batch sharded over 'data').

Why a subprocess: the fake device count (XLA_FLAGS) must be set before jax starts, and the test
session's jax has already started with one device. The child jits each config once per input
placement, on one device and sharded over 8, and the parent compares the two exactly.
"""

import os
import subprocess
import sys
import textwrap

import jax.numpy as jnp
import numpy as np
import pytest
import realtext
from helpers import HELPERS_PATH

from zhlm import defaults, masking  # noqa: F401  (the child uses masking through this module)

ROWS = 512  # divisible by 8; the statistics are tested elsewhere, here only equality matters
CONFIGS = {"span": ("span", "partial_mask", "unit"), "correction": ("correction", "mac", "token")}

CHILD = textwrap.dedent(
    """
    import sys
    import jax
    jax.config.update("jax_threefry_partitionable", True)
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    sys.path.insert(0, sys.argv[2])
    import test_multidevice as t

    assert len(jax.devices()) == 8, jax.devices()
    batch = t.batch()
    mesh = Mesh(np.array(jax.devices()), ("data",))
    out = {}
    for name in t.CONFIGS:
        f = jax.jit(lambda b, k, c=t.config(name): t.masking.mask_batch(b, k, c))
        one = f(jax.device_put(batch, jax.devices()[0]), jax.random.key(3))
        sharded = jax.device_put(batch, NamedSharding(mesh, P("data")))
        eight = f(sharded, jax.random.key(3))
        assert len(eight["input_ids"].sharding.device_set) == 8
        for k in one:
            out[f"{name}/one/{k}"] = np.asarray(one[k])
            out[f"{name}/eight/{k}"] = np.asarray(eight[k])
    np.savez(sys.argv[1], **out)
    """
)


def config(name):
    scheme, replacement, unit = CONFIGS[name]
    c = defaults.get_base_config()
    c.masking.scheme, c.masking.replacement, c.masking.replacement_unit = scheme, replacement, unit
    return c


def batch():
    return {k: jnp.asarray(v[:ROWS]) for k, v in realtext.cached("peoples_daily", 128).items()}


@pytest.mark.slow
def test_one_device_equals_eight_device_mesh(tmp_path):
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(
        os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu"
    )
    env["PYTHONPATH"] = os.pathsep.join([HELPERS_PATH, env.get("PYTHONPATH", "")])  # realtext
    path = tmp_path / "child.npz"
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), here], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    child = np.load(path)
    names = {k.split("/")[0] for k in child.files}
    assert names == set(CONFIGS) and "span/one/span_left" in child.files
    for k in child.files:
        if "/one/" in k:
            np.testing.assert_array_equal(child[k], child[k.replace("/one/", "/eight/")], err_msg=k)
