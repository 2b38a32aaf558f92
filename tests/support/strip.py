"""The conformance package's annotation stripping, for the tests that read real runs bare."""

from pipeaudit.conformance.strip import PP_SPAN, relabel_ranks, strip_run

__all__ = ["PP_SPAN", "relabel_ranks", "strip_run"]
