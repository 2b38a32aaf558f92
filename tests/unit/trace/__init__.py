"""Unit tests of ``pipeaudit.trace``."""
