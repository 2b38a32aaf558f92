"""Unit tests of ``pipeaudit.explain``."""
