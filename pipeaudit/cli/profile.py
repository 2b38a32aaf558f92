"""``pipeaudit profile``: a thin shell over :func:`pipeaudit.harness.run_profile`."""

from __future__ import annotations

import json
import sys

import click

from pipeaudit.harness.options import config_from_options, profile_options


@click.command("profile")
@profile_options
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="json: print the manifest on stdout.")
def command(fmt: str, **opts) -> None:
    """Run P ranks of real pipelined training under torch.profiler.

    Writes OUT/rank{r}.json.gz (one Kineto trace per rank) and OUT/manifest.json.
    Invalid combinations fail before any process starts.
    """
    from pipeaudit.harness import run_profile

    argv = ["pipeaudit", *sys.argv[1:]] if sys.argv and "pipeaudit" in sys.argv[0] else None
    config = config_from_options(opts, command=argv).validate()
    manifest = run_profile(config)
    if fmt == "json":
        click.echo(json.dumps(manifest, indent=2))
    else:
        walls = ", ".join(f"{w * 1000:.1f}" for w in manifest["step_wall_s"])
        click.echo(
            f"{config.out}: {manifest['num_ranks']} traces + manifest.json "
            f"({manifest['schedule']}, P={manifest['num_ranks']}, M={manifest['num_microbatches']}, "
            f"v={manifest['chunks']}, {manifest['backend']}); step wall ms: {walls}"
        )
