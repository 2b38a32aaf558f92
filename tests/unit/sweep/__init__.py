"""Unit tests of ``pipeaudit.sweep``."""
