"""A student's single-process pipeline: one model split into stages, hand-written microbatch loops.

The classic teaching setup, written as a user writes it (no pipeaudit, no torch.distributed):
the model is cut into ``--stages`` stages on one device, the batch into ``--microbatches``
microbatches, and one of three loops runs them:

* ``naive``: forward of microbatch i through every stage, then its backward, one at a time;
* ``gpipe``: every forward, then every backward;
* ``1f1b``: forward of microbatch i, then backward of microbatch i-1 (the delayed backward).

Each stage's forward and backward sit in the user's own spans, named like ``s2_fwd_mb5`` and
``s2_bwd_mb5`` (stage 2, microbatch 5). Each backward is run stage by stage (the activations
between stages are detached, as when the stages live on different devices). The trace is
written with ``torch.profiler`` and ``prof.step()`` per training step.

    python examples/student_loops.py --loop 1f1b --out trace.json.gz [--device cuda]
"""

from __future__ import annotations

import argparse

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function, schedule


def build_stages(stages: int, hidden: int, layers_per_stage: int, device: str,
                 slow_stage: int | None) -> list[nn.Module]:
    torch.manual_seed(0)
    out = []
    for s in range(stages):
        n = layers_per_stage * (3 if s == slow_stage else 1)
        out.append(nn.Sequential(*[m for _ in range(n) for m in (nn.Linear(hidden, hidden), nn.ReLU())])
                   .to(device))
    return out


def forward(stages, s: int, mb: int, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(input with grad, output) of stage s on microbatch mb."""
    inp = x.detach().requires_grad_(s > 0)
    with record_function(f"s{s}_fwd_mb{mb}"):
        out = stages[s](inp)
    return inp, out


def backward(s: int, mb: int, out: torch.Tensor, grad: torch.Tensor | None) -> None:
    with record_function(f"s{s}_bwd_mb{mb}"):
        out.backward(grad)


def run_microbatch_forward(stages, mb: int, x, y, saved) -> None:
    h = x
    for s in range(len(stages)):
        inp, out = forward(stages, s, mb, h)
        saved[(s, mb)] = (inp, out)
        h = out
    saved[(len(stages), mb)] = nn.functional.mse_loss(h, y)


def run_microbatch_backward(stages, mb: int, saved) -> None:
    last = len(stages) - 1
    grad = None
    for s in range(last, -1, -1):
        inp, out = saved.pop((s, mb))
        target = saved.pop((len(stages), mb)) if s == last else out
        backward(s, mb, target, grad)
        grad = inp.grad


def train_step(stages, loop: str, xs, ys) -> None:
    saved: dict = {}
    m = len(xs)
    if loop == "naive":
        for mb in range(m):
            run_microbatch_forward(stages, mb, xs[mb], ys[mb], saved)
            run_microbatch_backward(stages, mb, saved)
    elif loop == "gpipe":
        for mb in range(m):
            run_microbatch_forward(stages, mb, xs[mb], ys[mb], saved)
        for mb in range(m):
            run_microbatch_backward(stages, mb, saved)
    else:  # forward of i, then backward of i-1
        for mb in range(m):
            run_microbatch_forward(stages, mb, xs[mb], ys[mb], saved)
            if mb > 0:
                run_microbatch_backward(stages, mb - 1, saved)
        run_microbatch_backward(stages, m - 1, saved)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loop", choices=("naive", "gpipe", "1f1b"), required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--stages", type=int, default=4)
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--rows", type=int, default=64, help="rows per microbatch")
    ap.add_argument("--layers-per-stage", type=int, default=2)
    ap.add_argument("--slow-stage", type=int, default=None, help="a stage 3x heavier")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args(argv)
    stages = build_stages(args.stages, args.hidden, args.layers_per_stage, args.device, args.slow_stage)
    opt = torch.optim.SGD([p for st in stages for p in st.parameters()], lr=1e-3)
    gen = torch.Generator().manual_seed(1)
    xs = [torch.randn(args.rows, args.hidden, generator=gen).to(args.device) for _ in range(args.microbatches)]
    ys = [torch.randn(args.rows, args.hidden, generator=gen).to(args.device) for _ in range(args.microbatches)]
    train_step(stages, args.loop, xs, ys)  # warm-up
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device.startswith("cuda") else [])
    with profile(activities=activities, schedule=schedule(wait=0, warmup=0, active=args.steps, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(args.out)) as prof:
        for _ in range(args.steps):
            opt.zero_grad(set_to_none=True)
            train_step(stages, args.loop, xs, ys)
            opt.step()
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            prof.step()


if __name__ == "__main__":
    main()
