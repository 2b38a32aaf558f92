"""Unit tests of ``pipeaudit.audit``."""
