"""Runs SpecForge 0.2.0's own training entry on a CPU for the tests (test_trainer_specforge.py):
`python specforge_runner.py native|libshard train --config CONFIG`.

CPU stand-ins, in this test helper only (the shipped libshard.specforge runs unchanged on GPUs):
- `specforge.core.loss` (it imports `triton` and runs a Triton kernel): a module registered
  under that name before SpecForge imports it, whose `LogSoftmaxLoss` is the same objective in torch
  (mean over rows of -sum(target * log_softmax(logits)) * position_mask);
The test reads the metrics SpecForge's console logger prints each step (`step N: {...}`).
The environment sets SPECFORGE_DEVICE=cpu and TORCHDYNAMO_DISABLE=1; the config NO_SHARD, sdpa.
"""

import os
import sys
import types

import torch

import specforge.core  # noqa: E402  (the package; its loss module is replaced below)


class LogSoftmaxLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target, position_mask):
        b, t, v = logits.shape
        with torch.enable_grad():
            x = logits.detach().float().requires_grad_(True)
            per_row = -(target.float() * torch.log_softmax(x, dim=-1)).sum(-1)
            loss = (per_row.reshape(b * t) * position_mask.reshape(b * t).float()).mean()
        ctx.save_for_backward(x, loss)
        ctx.dtype = logits.dtype
        return loss.detach()

    @staticmethod
    def backward(ctx, grad_output):
        x, loss = ctx.saved_tensors
        (g,) = torch.autograd.grad(loss, x, grad_output)
        return g.to(ctx.dtype), None, None


def _compute_loss(logits, target_p, position_mask):
    return -(target_p * torch.log_softmax(logits.float(), -1)).sum(-1) * position_mask


sf_loss = types.ModuleType("specforge.core.loss")
sf_loss.LogSoftmaxLoss = LogSoftmaxLoss
sf_loss._compute_loss = _compute_loss
sys.modules["specforge.core.loss"] = sf_loss
specforge.core.loss = sf_loss


if __name__ == "__main__":
    which, argv = sys.argv[1], sys.argv[2:]
    if which == "libshard":
        import libshard.specforge

        sys.exit(libshard.specforge.main(argv))
    import specforge.cli

    sys.exit(specforge.cli.main(argv))
