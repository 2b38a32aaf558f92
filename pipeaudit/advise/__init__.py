"""Which schedule, chunks and microbatch count to run instead: predicted from a measured run
(:func:`advise`), proven by reruns of harness runs (:func:`pipeaudit.advise.verify.verify`)."""

from pipeaudit.advise.advise import Advice, Candidate, advise

__all__ = ["Advice", "Candidate", "advise"]
