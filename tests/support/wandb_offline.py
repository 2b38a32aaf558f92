"""Read back what an offline W&B run logged: the history rows of its ``run-*.wandb`` file.

wandb 0.31 ships no Python reader for it (its Go core writes and syncs it). The file is a
7-byte header (``:W&B``, magic, version) and then LevelDB's log format: 32 KiB blocks of
chunks, each ``crc32c (4) | length (2, little-endian) | type (1: full, 2: first, 3: middle,
4: last)``, that hold serialised ``wandb_internal_pb2.Record`` messages.
"""

from __future__ import annotations

import json
from pathlib import Path

BLOCK = 32 * 1024
HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path) -> list[bytes]:
    """The serialised records of a .wandb file."""
    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", f"{path}: not a W&B run file"
    pos, out, buf = HEADER, [], b""
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:  # the block's tail is padding
            pos += left
            continue
        length = int.from_bytes(data[pos + 4:pos + 6], "little")
        kind = data[pos + 6]
        chunk = data[pos + HEADER:pos + HEADER + length]
        pos += HEADER + length
        if kind == 0:
            continue
        buf = chunk if kind in (FULL, FIRST) else buf + chunk
        if kind in (FULL, LAST):
            out.append(buf)
    return out


def history(run_dir: Path) -> list[dict]:
    """Every ``wandb.log`` row of the offline run in ``run_dir``, keys to values."""
    from wandb.proto import wandb_internal_pb2 as pb

    (path,) = Path(run_dir).glob("run-*.wandb")
    rows = []
    for raw in records(path):
        rec = pb.Record()
        rec.ParseFromString(raw)
        if rec.WhichOneof("record_type") == "history":
            rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                         for item in rec.history.item})
    return rows
