"""The rank and world size of this process, for the Loader and the Writer.

One rule, the C++ library's (``libshard/world.h``, ``ResolveWorld``), which ``libshard pack
--part auto`` follows too. Python adds only torch.distributed: when it is initialised its rank
and world size stand in for the values not given explicitly. The precedence:

1. explicit ``rank`` / ``world_size``;
2. torch.distributed, when initialised;
3. torchrun's ``RANK`` / ``WORLD_SIZE``;
4. a Slurm job array: ``SLURM_ARRAY_TASK_ID`` - ``SLURM_ARRAY_TASK_MIN`` of
   ``SLURM_ARRAY_TASK_COUNT`` tasks, times ``SLURM_NTASKS`` processes each
   (``SLURM_PROCID`` within one);
5. Slurm's ``SLURM_PROCID`` / ``SLURM_NTASKS``;
6. rank 0 of 1.

A value given alone pins its half; the other comes from the first source below it that sets it.
Inconsistent launcher variables raise ``InvalidArgumentError`` naming them.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Tuple

from . import _core


def _distributed() -> Optional[Tuple[int, int]]:
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except Exception:  # noqa: BLE001 - a broken distributed setup falls back to the environment
        pass
    return None


def resolve_world(rank: Any = None, world_size: Any = None,
                  environment: Optional[Mapping[str, str]] = None) -> Tuple[int, int, str]:
    """(rank, world_size, where from) by the rule above; ``environment`` replaces
    ``os.environ`` (for tests)."""
    source = "arguments"
    if rank is None or world_size is None:
        dist = _distributed()
        if dist is not None:
            source = "torch.distributed" if rank is None and world_size is None \
                else "arguments and torch.distributed"
            rank = dist[0] if rank is None else rank
            world_size = dist[1] if world_size is None else world_size
    env = dict(environment) if environment is not None else None
    out = _core.resolve_world(rank, world_size, source, env)
    return int(out["rank"]), int(out["world_size"]), str(out["source"])
