"""Unit tests of ``pipeaudit.harness``."""
