"""Unit tests, one directory per layer of ``pipeaudit/``."""
