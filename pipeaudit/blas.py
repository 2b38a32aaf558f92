"""numpy's BLAS held to one thread in the CLI's commands that read traces.

numpy's wheels bundle OpenBLAS, which starts a thread per core when numpy is imported; the
idle threads spin before they sleep (``blas_thread_server``). pipeaudit never multiplies a
matrix, so on 2 cores that spin only takes CPU from the decode: about 0.05 s of CPU in each
process that imports numpy (the CLI and its pool's forkserver), and ``analyze`` on 4 x 100 MB
took 2.37-2.42 s of CPU with one BLAS thread against 2.42-2.65 s without (measured
when introduced; git history of docs/performance.md). The console entry point sets it before
a trace-reading command imports anything (:func:`one_blas_thread`), unless the user chose a value; the pool's workers
inherit it. A library caller's process (a notebook) is left alone.
"""

from __future__ import annotations

import os
import sys

#: OpenBLAS's thread count.
ENV = "OPENBLAS_NUM_THREADS"


def one_blas_thread() -> bool:
    """Set :data:`ENV` to 1; False (and nothing changed) when numpy is already loaded or the
    user set it."""
    if "numpy" in sys.modules or ENV in os.environ:
        return False
    os.environ[ENV] = "1"
    return True
