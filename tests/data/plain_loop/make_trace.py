"""Write ``trace.json.gz``: a real torch.profiler trace of a plain training loop, no pipeline.

One process, a two-layer MLP, three steps of forward, backward and SGD under
``torch.profiler.profile()`` on the CPU: the first thing a newcomer may hand to pipeaudit.
Run it again with ``python tests/data/plain_loop/make_trace.py`` (needs torch).
"""

from __future__ import annotations

import gzip
import shutil
import sys
import tempfile
from pathlib import Path

import torch
from torch.profiler import profile


def main(out: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with profile() as prof:
        for _ in range(3):
            loss = model(torch.randn(32, 64)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(raw))
        with raw.open("rb") as src, gzip.GzipFile(out, "wb", mtime=0) as dst:
            shutil.copyfileobj(src, dst)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("trace.json.gz"))
