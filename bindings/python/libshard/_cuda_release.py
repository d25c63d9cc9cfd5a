"""Deferred release of pinned arena memory behind asynchronous copies to the GPU.

With a pinned arena, ``t.to("cuda", non_blocking=True)`` on a delivered tensor returns before the
copy has read the host bytes. PyTorch guards its own pinned memory against reuse until such a copy
completes (its caching host allocator records an event on the copy's stream), but not memory it
did not allocate. Without a guard, a trainer that drops the CPU tensor right after the call (the
usual ``batch = {k: v.cuda(non_blocking=True) ...}``) would let the loader read the next sample
into memory the copy has not read yet.

So the Loader gives its core a release hook (``_core.Loader.set_release_hook``): when the last
reference to a sample's tensor goes, the hook gets a token that holds the memory, records a CUDA
event on the current stream (where the trainer's copy was queued), and keeps the token until the
event has completed. The Loader calls :meth:`DeferredRelease.step` before each step: it drops the
tokens whose events completed and waits for those older than ``lag_steps`` steps, so memory held
this way stays bounded even when the GPU runs far behind.

When CUDA was never initialised in the process no copy can be in flight, and tokens are dropped
at once.
"""
from __future__ import annotations

import collections
from typing import Any, Callable, Deque, Optional, Tuple

import torch


class DeferredRelease:
    """The release hook of a pinned Loader (see the module docstring).

    No lock: ``collections.deque`` appends and pops are atomic under the GIL, tensors may die on
    any thread, and a lock held across a CUDA call (which releases the GIL) could deadlock with
    a thread that holds the GIL and waits for the lock. Only the consumer calls :meth:`step`."""

    def __init__(self, lag_steps: int = 2, event_factory: Optional[Callable[[], Any]] = None,
                 cuda_initialized: Optional[Callable[[], bool]] = None) -> None:
        self._lag = max(1, int(lag_steps))
        self._event_factory = event_factory or torch.cuda.Event
        self._cuda_initialized = cuda_initialized or torch.cuda.is_initialized
        self._pending: Deque[Tuple[int, Any, Any]] = collections.deque()
        self._step = 0

    def __call__(self, token: Any) -> None:
        if not self._cuda_initialized():
            return  # no CUDA work can read this memory: released when `token` goes
        event = self._event_factory()
        event.record()
        self._pending.append((self._step, event, token))

    @property
    def pending(self) -> int:
        """Tokens still held (one per tensor whose memory awaits a GPU event)."""
        return len(self._pending)

    def step(self) -> None:
        """Called before each step: releases what the GPU has finished with, and waits for what
        was released more than ``lag_steps`` steps ago."""
        self._step += 1
        oldest_allowed = self._step - self._lag
        while self._pending:
            queued_at, event, _token = self._pending[0]
            if queued_at >= oldest_allowed and not event.query():
                break
            if queued_at < oldest_allowed:
                event.synchronize()
            try:
                self._pending.popleft()
            except IndexError:
                break

    def flush(self) -> None:
        """Waits for every pending event and releases everything (the Loader's close)."""
        while self._pending:
            try:
                _, event, _token = self._pending.popleft()
            except IndexError:
                break
            event.synchronize()
