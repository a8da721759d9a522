"""A pretraining run in its own process, for the tests that kill it or run several at once.

  python pretrain_child.py SPEC_JSON

SPEC: ``recipe``, ``workdir``, ``overrides`` ({"train.num_steps": 12, ...}), optional
``signal_at`` (a step) and ``signal`` (``KILL`` or ``TERM``): once the loader is asked for that
step's batch, the process waits for the newest checkpoint before it to be committed (for KILL)
and signals itself. Losses are read back from the workdir's metrics.jsonl.
"""

import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # helpers


def main():
    spec = json.loads(sys.argv[1])
    from helpers import load_config

    from zhlm.data import loader
    from zhlm.train.loop import train_and_evaluate

    config = load_config(spec["recipe"], "tiny")
    for key, value in spec["overrides"].items():
        section, name = key.split(".")
        config[section][name] = tuple(value) if isinstance(value, list) else value
    at = spec.get("signal_at")
    if at:
        every = config.train.checkpoint_every
        committed = os.path.join(spec["workdir"], "checkpoints", str((at - 1) // every * every))
        original = loader.Loader.__next__

        def next_batch(self):
            if self.sampler.step == at - 1:  # the batch of step `at` (1-based)
                if spec["signal"] == "KILL":
                    deadline = time.time() + 60
                    while not os.path.isdir(committed) and time.time() < deadline:
                        time.sleep(0.05)
                os.kill(os.getpid(), getattr(signal, "SIG" + spec["signal"]))
            return original(self)

        loader.Loader.__next__ = next_batch
    train_and_evaluate(config, spec["workdir"])


if __name__ == "__main__":
    main()
