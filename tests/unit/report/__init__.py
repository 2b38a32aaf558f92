"""Unit tests of ``pipeaudit.report``."""
