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
    """Run P x D x T ranks of real pipelined training under torch.profiler.

    Writes OUT/rank{r}.json.gz (one Kineto trace per rank) and OUT/manifest.json.
    Invalid combinations fail before any process starts.
    """
    from pipeaudit.extras import require

    framework = opts.get("framework", "torch")
    require("harness" if framework == "torch" else framework,
            "profile" if framework == "torch" else f"profile --framework {framework}")
    from pipeaudit.harness import run_profile

    config = config_from_options(opts, command=_invocation()).validate()
    manifest = run_profile(config)
    if fmt == "json":
        click.echo(json.dumps(manifest, indent=2))
    else:
        walls = ", ".join(f"{w * 1000:.1f}" for w in manifest["step_wall_s"])
        layout = manifest["layout"]
        shape = f"P={config.stages}"
        if layout["dp"] > 1:
            shape += f", D={layout['dp']} ({layout['dp_mode']})"
        if layout["tp"] > 1:
            shape += f", T={layout['tp']}"
        where = (f"single process on {', '.join(manifest['stage_devices'])}"
                 if manifest["single_process"] else manifest["backend"])
        click.echo(
            f"{config.out}: {manifest['world_size']} trace(s) + manifest.json "
            f"({manifest['schedule']}, {shape}, M={manifest['num_microbatches']}, "
            f"v={manifest['chunks']}, {where}); step wall ms: {walls}"
        )


def _invocation() -> list[str] | None:
    """The argv as typed, when this process is ``pipeaudit`` / ``python -m pipeaudit``.

    Otherwise (e.g. click's test runner) None: the manifest then records a
    canonical command that spells out every option.
    """
    prog = sys.argv[0] if sys.argv else ""
    if prog.endswith(("/pipeaudit", "pipeaudit/__main__.py")) or prog == "pipeaudit":
        return ["pipeaudit", *sys.argv[1:]]
    return None
