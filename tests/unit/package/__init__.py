"""Unit tests of pipeaudit's top-level modules (progress, timings) and of the package as a whole."""
