"""Shared test helpers: paths (``paths``), the CLI runner (``cli``), and traces, runs and
timelines built with a known answer (``synth``, ``builders``, ``timelines``, ``fuzz_traces``)."""
