"""Unit tests of ``pipeaudit.gate``."""
