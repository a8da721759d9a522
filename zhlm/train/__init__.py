"""Training: optimizer, mesh and rules, the step, the loop, checkpoints, and TPU plans.

``compile_plan`` is imported on first use: it brings the model and the step, which code that
only needs, say, ``zhlm.train.optim`` should not pay for.
"""


def __getattr__(name):
    if name == "compile_plan":
        from zhlm.train.plan import compile_plan

        return compile_plan
    raise AttributeError(f"module 'zhlm.train' has no attribute {name!r}")
