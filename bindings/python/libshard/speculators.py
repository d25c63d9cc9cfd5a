"""libshard inside vLLM speculators' training (``speculators`` 0.9.0 + ``hs-connectors`` 0.9.0).

speculators trains from an Arrow dataset (``input_ids``, ``loss_mask``, ``seq_len``) plus one
``hidden_states/hs_{i}.safetensors`` per row (``hidden_states [S, L+1, H]``, ``token_ids [S]``;
the fp8 backend stores ``float8_e4m3fn`` plus ``hidden_states_scales [S,1,1]``), read through a
``hs_connectors`` backend. This module registers a backend named ``libshard`` that serves the
same samples from a packed dataset. Pack the hidden states once (the Arrow part stays as is)::

    libshard pack DATA/hidden_states -o DATA/hidden_states.libshard

and train with speculators' own command line, the backend chosen by name::

    python -m libshard.speculators train --data-path DATA --hidden-states-backend libshard ...
    torchrun --nproc-per-node 8 -m libshard.speculators train ... --hidden-states-backend libshard

(``--hidden-states-path`` names the dataset; by default ``DATA/hidden_states.libshard`` when it
exists, else ``DATA/hidden_states``.) ``get_cached(i)`` returns what the ``file`` backend's
returns for ``hs_{i}.safetensors`` (bf16), or for an fp8 dump what the ``fp8`` backend's returns
(dequantized with hs_connectors' own function, bit for bit). Row ``i`` is found by the source
path the index records (``hs_{i}.safetensors``), not by position, so a missing file stays
missing (``None``, as the file backend answers) instead of shifting the rows after it. The
transfer pickles as its path and opens the dataset lazily in each DataLoader worker.

Importing this module imports ``hs_connectors`` and registers the backend; do it before
``speculators.train.config`` is imported (``python -m libshard.speculators`` does).
"""

from __future__ import annotations

import os
import re
import sys
import threading
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

try:
    from hs_connectors import FP8Transfer, HiddenStatesBackend, HiddenStatesTransfer
    from hs_connectors.fp8_utils import SCALES_KEY, dequantize_fp8_tensor
    from hs_connectors.transfer import FileBackend, _add_argument_if_absent
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "libshard.speculators needs hs-connectors 0.9 (and speculators 0.9 to train): "
        "`pip install --no-deps speculators==0.9.0 hs-connectors==0.9.0` and "
        "`pip install libshard[speculators]` (their data-path dependencies; neither replaces "
        f"your torch nor pulls vllm). Cause: {e}") from e

import torch

from . import _core
from ._dataset import Dataset

PathLike = Union[str, "os.PathLike[str]"]

#: The name the backend is registered under (``--hidden-states-backend libshard``).
BACKEND_NAME = "libshard"
_HS_NAME = re.compile(r"(?:^|/)hs_(\d+)\.safetensors(?:\.gz)?$")

__all__ = ["BACKEND_NAME", "LibshardBackend", "LibshardTransfer", "main"]


class LibshardTransfer(HiddenStatesTransfer):
    """A ``HiddenStatesTransfer`` over a libshard dataset packed from ``hs_{i}.safetensors``.

    Args:
      path: the dataset directory.
      dequantize_dtype: the dtype fp8 samples (those with ``hidden_states_scales``) are
        dequantized to, as ``FP8Transfer``; bf16 samples are served as stored.
      verify: check each sample's checksum when it is read.
    """

    def __init__(self, path: PathLike, dequantize_dtype: torch.dtype = torch.bfloat16,
                 verify: bool = True) -> None:
        self.path = os.path.abspath(os.fspath(path))
        self.dequantize_dtype = dequantize_dtype
        self.verify = bool(verify)
        self._init_state()

    def _init_state(self) -> None:
        self._lock = threading.Lock()
        self._ds: Optional[Dataset] = None
        self._rows: Optional[Dict[int, int]] = None
        # Online generation (samples vLLM writes while training) stays on the files vLLM writes.
        self._files = FP8Transfer(Path(self.path), dequantize_dtype=self.dequantize_dtype)

    # Pickles as its options: each spawned worker opens the dataset on first use.
    def __getstate__(self) -> Dict[str, Any]:
        return {"path": self.path, "dequantize_dtype": self.dequantize_dtype,
                "verify": self.verify}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_state()

    def setup(self) -> None:
        self._open()

    def _open(self):
        with self._lock:
            if self._ds is None:
                ds = Dataset(self.path, verify=self.verify, metadata=False)
                rows: Dict[int, int] = {}
                for index, source in enumerate(_core.dataset_sources(ds._core)):
                    m = _HS_NAME.search(source)
                    if m:
                        rows.setdefault(int(m.group(1)), index)
                if not rows and len(ds):
                    raise ValueError(
                        f"{self.path}: no sample was packed from an hs_{{i}}.safetensors file "
                        f"(the first is {ds.source(0)!r}); pack speculators' hidden_states "
                        "directory with `libshard pack DATA/hidden_states -o OUT`")
                self._rows, self._ds = rows, ds
            return self._ds, self._rows

    def sample_index(self, file_idx: int) -> Optional[int]:
        """The dataset sample packed from ``hs_{file_idx}.safetensors``, or None."""
        return self._open()[1].get(int(file_idx))

    def get_cached(self, file_idx: int) -> Optional[Dict[str, torch.Tensor]]:
        ds, rows = self._open()
        index = rows.get(int(file_idx))
        if index is None:
            return None
        sample = ds[index]
        if SCALES_KEY not in sample:
            return sample
        # FP8Transfer._dequantize, with hs_connectors' own function.
        out = dict(sample)
        out["hidden_states"] = dequantize_fp8_tensor(sample["hidden_states"], sample[SCALES_KEY],
                                                     dtype=self.dequantize_dtype)
        del out[SCALES_KEY]
        return out

    def get_generated(self, hs_transfer_params: Dict[str, Any]):
        return self._files.get_generated(hs_transfer_params)

    def delete(self, handle: str) -> None:
        self._files.delete(handle)


class LibshardBackend(HiddenStatesBackend):
    """``--hidden-states-backend libshard``: cached samples from a libshard dataset; samples
    generated during training (``--on-missing generate``) through the files vLLM writes, as the
    ``fp8``/``file`` backends read them."""

    @staticmethod
    def add_train_args(parser) -> None:
        _add_argument_if_absent(
            parser, "--hidden-states-path", type=str, default=None,
            help=("The path where cached hidden states files are stored. (Default: "
                  "args.data_path / 'hidden_states')"))

    @staticmethod
    def add_launch_args(parser) -> None:
        FileBackend.add_launch_args(parser)

    @staticmethod
    def from_train_args(args, data_path: str) -> LibshardTransfer:
        path = getattr(args, "hidden_states_path", None)
        if not path:
            packed = Path(data_path) / "hidden_states.libshard"
            path = packed if packed.is_dir() else Path(data_path) / "hidden_states"
        return LibshardTransfer(path)

    @staticmethod
    def build_kv_transfer_config(args) -> Dict[str, Any]:
        # vLLM writes safetensors files (libshard pack them afterwards).
        return FileBackend.build_kv_transfer_config(args)


# Registered by the importable module only: run as `python -m libshard.speculators`, this file is
# also `__main__`, whose classes spawned workers could not unpickle.
if __name__ != "__main__" and BACKEND_NAME not in HiddenStatesBackend.registry:
    HiddenStatesBackend.register(BACKEND_NAME)(LibshardBackend)


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m libshard.speculators train ARGS...``: speculators' training command line
    (``python -m speculators.train ARGS...``) with the ``libshard`` backend registered."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] != "train":
        print("usage: python -m libshard.speculators train ARGS...  (speculators' training "
              "arguments; --hidden-states-backend libshard)", file=sys.stderr)
        return 2
    from speculators.train.cli import main as train_main
    from speculators.train.config import TrainConfig

    train_main(TrainConfig.resolve(argv[1:]))
    return 0


if __name__ == "__main__":
    from libshard.speculators import main as _main  # the registered module, not this __main__

    sys.exit(_main())
