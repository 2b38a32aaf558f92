"""``python -m pipeaudit.harness``: one rank under torchrun.

    torchrun --nproc-per-node 4 -m pipeaudit.harness --schedule 1f1b -M 8 --out runs/x

Takes the same options as ``pipeaudit profile``; the rank comes from RANK /
WORLD_SIZE / LOCAL_RANK. ``--ranks`` defaults to WORLD_SIZE / (dp x tp); P x D x T must
equal WORLD_SIZE (``--single-process``: WORLD_SIZE must be 1).
Timeouts and process clean-up are torchrun's job here; rank 0 writes the manifest.
"""

from __future__ import annotations

import os
import sys

import click

from pipeaudit.errors import ConfigError, PipeauditError
from pipeaudit.harness.options import config_from_options, profile_options


@click.command("pipeaudit.harness", context_settings={"help_option_names": ["-h", "--help"]})
@profile_options
def main(**opts) -> None:
    """One rank of `pipeaudit profile`, for torchrun."""
    try:
        if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
            raise ConfigError(
                "python -m pipeaudit.harness runs one rank under torchrun (RANK/WORLD_SIZE "
                "unset); use `pipeaudit profile` to launch local processes"
            )
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        local_rank = int(os.environ.get("LOCAL_RANK", rank))
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
        command = [sys.executable, "-m", "pipeaudit.harness", *sys.argv[1:]]
        per_pipeline = max(1, opts["dp"]) * max(1, opts["tp"])
        default_stages = 2 if opts["single_process"] else max(1, world // per_pipeline)
        config = config_from_options(opts, default_stages=default_stages, command=command)
        config = config.replace(progress=False).validate()
        if config.world_size != world:
            raise ConfigError(
                f"--ranks {config.stages} x --dp {config.dp} x --tp {config.tp} = "
                f"{config.world_size} processes != WORLD_SIZE {world} under torchrun"
                if not config.single_process else
                f"--single-process runs one process, but WORLD_SIZE is {world} under torchrun"
            )
        from pipeaudit.harness.worker import run_rank

        run_rank(config, rank, world, local_rank, local_world, "torchrun")
    except PipeauditError as exc:
        click.echo(f"pipeaudit: error: {exc}", err=True)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
