"""SAM under DDP: each rank perturbs with its own gradient (no all-reduce), then the second gradients are averaged."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

from cadence.testing import mlp_classifier

SCRIPT = Path(__file__).with_name("ddp_run.py")


def _gradient(model: torch.nn.Module, batch: list[torch.Tensor]) -> list[torch.Tensor]:
    model.zero_grad()
    model.loss(model(batch), batch).backward()
    return [p.grad.clone() for p in model.parameters()]


def _reference(initial: dict, batches: list[list[list[torch.Tensor]]], local: bool) -> dict:
    """SGD(lr=0.5) with SAM(rho=0.5) by hand; `local`: each rank's own perturbation (else the averaged one)."""
    model = mlp_classifier(6, 3, hidden=8)
    model.load_state_dict(initial)
    params = list(model.parameters())
    for step_batches in zip(*batches):  # one batch per rank
        weights = [p.detach().clone() for p in params]
        firsts = [_gradient(model, batch) for batch in step_batches]
        if not local:
            firsts = [[torch.stack(gs).mean(0) for gs in zip(*firsts)]] * len(firsts)
        seconds = []
        for batch, grads in zip(step_batches, firsts):
            norm = torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))
            with torch.no_grad():
                for p, w, g in zip(params, weights, grads):
                    p.copy_(w + g * (0.5 / (norm + 1e-12)))
            seconds.append(_gradient(model, batch))
        with torch.no_grad():
            for p, w, gs in zip(params, weights, zip(*seconds)):
                p.copy_(w - 0.5 * torch.stack(gs).mean(0))
    return model.state_dict()


def test_each_rank_perturbs_with_its_own_gradient(tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(SCRIPT)]
    run = subprocess.run([*launch, str(tmp_path)], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-4000:]
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in (0, 1)]
    for name, value in ranks[0]["final"].items():  # the second gradients are all-reduced: ranks agree
        assert torch.equal(value, ranks[1]["final"][name])
    batches = [rank["batches"] for rank in ranks]
    assert len(batches[0]) == 3 and not torch.equal(batches[0][0][0], batches[1][0][0])
    local = _reference(ranks[0]["initial"], batches, local=True)
    synced = _reference(ranks[0]["initial"], batches, local=False)
    for name, value in ranks[0]["final"].items():
        torch.testing.assert_close(value, local[name], rtol=1e-5, atol=1e-6)
    assert any(not torch.allclose(ranks[0]["final"][n], synced[n], rtol=1e-5, atol=1e-6) for n in synced)
