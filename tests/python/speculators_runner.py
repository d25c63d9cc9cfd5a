"""Runs speculators 0.9.0's own training entry on a CPU for the tests
(test_trainer_speculators.py): `python speculators_runner.py native|libshard train ARGS...`.

CPU stand-ins for the three places its trainer assumes an accelerator, in this test helper only
(the shipped libshard.speculators runs unchanged on GPUs):
`speculators.train.trainer.get_local_rank` gives the device "cpu", `Trainer.device_type` is
"cpu" (autocast), `torch.accelerator.synchronize` does nothing. The metrics the trainer logs ("speculators.metrics" records, dicts) also go, at full
precision, to $SPECULATORS_METRICS as JSON lines.
"""

import json
import logging
import os
import sys

import torch

torch.accelerator.synchronize = lambda *a, **k: None

import speculators.train.trainer as sp_trainer  # noqa: E402

sp_trainer.get_local_rank = lambda: "cpu"
_init = sp_trainer.Trainer.__init__


def _cpu_init(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    self.device_type = "cpu"


sp_trainer.Trainer.__init__ = _cpu_init


class _JsonMetrics(logging.Handler):
    def emit(self, record):
        msg = record.msg
        path = os.environ.get("SPECULATORS_METRICS")
        if path and isinstance(msg, dict):
            with open(path, "a") as f:
                f.write(json.dumps(msg, default=lambda v: float(v) if hasattr(v, "__float__")
                                   else str(v)) + "\n")


import speculators.train.cli as sp_cli  # noqa: E402

_setup_metric_logger = sp_cli.setup_metric_logger


def _setup_with_json(*args, **kwargs):  # main() (re)configures the metric logger first
    _setup_metric_logger(*args, **kwargs)
    logging.getLogger("speculators.metrics").addHandler(_JsonMetrics())


sp_cli.setup_metric_logger = _setup_with_json

if __name__ == "__main__":
    which, argv = sys.argv[1], sys.argv[2:]
    if which == "libshard":
        import libshard.speculators

        sys.exit(libshard.speculators.main(argv))
    from speculators.train.cli import main
    from speculators.train.config import TrainConfig

    main(TrainConfig.resolve(argv[1:]))
