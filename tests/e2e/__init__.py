"""End to end: real multi-process harness runs, whole analyses of real traces, the docs."""
