"""Pipelined training that audits itself every profiled window (run it under torchrun).

A small MLP cut into one stage per rank, trained with torch.distributed.pipelining's 1F1B over
gloo on the CPU, profiled with ``schedule(wait, warmup, active, repeat)`` and
``pipeaudit.profiler.trace_handler``: each window's traces land in ``--out`` under torch's own
names, its audit in ``--out/pipeaudit/step_N/audit.json`` and its scalars in a TensorBoard
event file in ``--out`` (and in MLflow / W&B when a run is active):

    torchrun --nproc-per-node 4 examples/train_with_handler.py --out tb/

``--handler torch`` uses ``torch.profiler.tensorboard_trace_handler`` instead (the benchmark
compares the two); ``--slow-stage 2=3`` makes stage 2 three times heavier; ``--skip-trace 3:2``
makes rank 3 write no trace for the 2nd window (a lost file); ``--mlflow URI`` and
``--wandb-offline DIR`` start a run on rank 0 that the scalars go to. The training does not
wait for the audits (rank 0 says where they land as it exits); ``--wait-audits S`` makes
rank 0 wait for them, to log every window to W&B's run before it ends.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler


def stage_module(stage: int, hidden: int, layers: int, heavy: int) -> nn.Module:
    """The layers of one stage; a heavy stage has ``heavy`` times as many."""
    torch.manual_seed(stage)
    return nn.Sequential(*[nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU())
                           for _ in range(layers * heavy)])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="trace folder (TensorBoard logdir)")
    p.add_argument("--handler", choices=["pipeaudit", "torch", "pipeaudit-no-audit"],
                   default="pipeaudit")
    p.add_argument("--steps", type=int, default=None,
                   help="training steps (default: every window of the profiler's schedule)")
    p.add_argument("--wait", type=int, default=1)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--active", type=int, default=2)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--microbatches", type=int, default=4)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2, help="layers per stage")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--slow-stage", default=None, metavar="S=K")
    p.add_argument("--skip-trace", default=None, metavar="RANK:WINDOW")
    p.add_argument("--rank-timeout", type=float, default=300.0)
    p.add_argument("--gate", default=None, help="baseline each window is gated against")
    p.add_argument("--audit-normal-priority", action="store_true",
                   help="run the audits at normal priority (trace_handler(low_priority=False))")
    p.add_argument("--mlflow", default=None, metavar="URI")
    p.add_argument("--wandb-offline", default=None, metavar="DIR")
    p.add_argument("--timing", default=None, help="rank 0 writes its step times here (JSON)")
    p.add_argument("--wait-audits", type=float, default=0.0, metavar="S",
                   help="rank 0 waits up to S seconds for the audits before it exits (a test's "
                        "choice: a training need not wait, the audits finish on their own)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    heavy_stage, heavy = (map(int, args.slow_stage.split("="))) if args.slow_stage else (-1, 1)
    module = stage_module(rank, args.hidden, args.layers, heavy if rank == heavy_stage else 1)
    stage = PipelineStage(module, rank, world, torch.device("cpu"))
    pipe = Schedule1F1B(stage, args.microbatches, loss_fn=nn.functional.mse_loss)
    opt = torch.optim.SGD(module.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(args.batch, args.hidden, generator=gen)
    y = torch.randn(args.batch, args.hidden, generator=gen)

    if rank == 0 and args.mlflow:
        if args.mlflow.startswith("file:"):  # MLflow 3 keeps its file store behind this switch
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        import mlflow

        mlflow.set_tracking_uri(args.mlflow)
        mlflow.start_run(run_name="train_with_handler")
    if rank == 0 and args.wandb_offline:
        import wandb

        wandb.init(project="pipeaudit", mode="offline", dir=args.wandb_offline)

    if args.handler == "torch":
        handler = tensorboard_trace_handler(args.out)
    else:
        from pipeaudit.profiler import trace_handler

        handler = trace_handler(args.out, rank_timeout_s=args.rank_timeout, gate=args.gate,
                                audit=args.handler == "pipeaudit",
                                low_priority=not args.audit_normal_priority)
    skip_rank, skip_window = map(int, args.skip_trace.split(":")) if args.skip_trace else (-1, 0)
    handler_s: list[float] = []

    def on_ready(prof):  # timed; with --skip-trace this rank loses its trace of one window
        t0 = time.perf_counter()
        if not (rank == skip_rank and len(handler_s) + 1 == skip_window):
            handler(prof)
        handler_s.append(time.perf_counter() - t0)

    cycle = args.wait + args.warmup + args.active
    steps = args.steps or cycle * args.repeat
    times = []
    with profile(activities=[ProfilerActivity.CPU],
                 schedule=schedule(wait=args.wait, warmup=args.warmup, active=args.active,
                                   repeat=args.repeat),
                 on_trace_ready=on_ready) as prof:
        for _ in range(steps):
            t0 = time.perf_counter()
            opt.zero_grad()
            if rank == 0:
                pipe.step(x)
            elif rank == world - 1:
                pipe.step(target=y)
            else:
                pipe.step()
            opt.step()
            prof.step()
            times.append(time.perf_counter() - t0)
    loop_end = time.time()
    dist.barrier()
    if rank == 0 and args.timing:
        with open(args.timing, "w") as fh:
            json.dump({"handler": args.handler, "step_s": times, "handler_s": handler_s,
                       "loop_end": loop_end}, fh)
    if rank == 0 and args.handler == "pipeaudit" and args.wait_audits > 0:
        handler.wait(args.wait_audits)
        done = [d.get("window", {}).get("label") for d in handler.audits]
        print(f"rank 0: {len(done)} window(s) audited: {', '.join(map(str, done))}", flush=True)
    if rank == 0 and args.mlflow:
        import mlflow

        mlflow.end_run()
    if rank == 0 and args.wandb_offline:
        import wandb

        wandb.finish()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
