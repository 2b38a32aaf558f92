"""The point-to-point link between neighbouring stages: latency and bandwidth, fitted on
transfers timed at several message sizes.

One pipelined run sends every message at one size (a microbatch's activations, or their
gradients, alike), so its own transfers cannot tell latency from bandwidth. ``pipeaudit
profile`` therefore times the link itself before the profiled steps: the first rank of the
pipeline and its downstream neighbour send messages of three sizes around one microbatch's
activations back and forth over the run's process group and devices (manifest
``p2p_link.samples``: ``[bytes, one-way seconds]`` per transfer). :func:`fit_link` fits
``time = latency + bytes / bandwidth`` on the median time of each size (least squares).

A prediction at another microbatch size moves each cross-rank delay by the change of its
message over the bandwidth (:meth:`Link.delay_change_ns`); the rest of a measured delay (the
latency, the receiver's host work) is kept as measured.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median


@dataclass(frozen=True)
class Link:
    """A fitted link: ``latency_s`` + bytes / ``bandwidth`` (bytes/s) per one-way transfer."""

    latency_s: float
    #: bytes/s; None when the timed sizes showed no growth with size (nothing to scale)
    bandwidth: float | None
    sizes: int  #: distinct message sizes fitted
    transfers: int  #: timed transfers behind the fit

    def delay_change_ns(self, old_bytes: float, new_bytes: float) -> float:
        """How much longer (ns, negative: shorter) a message of ``new_bytes`` takes than one
        of ``old_bytes``."""
        if self.bandwidth is None:
            return 0.0
        return (new_bytes - old_bytes) / self.bandwidth * 1e9

    def describe(self) -> str:
        bw = ("no growth with size" if self.bandwidth is None
              else f"{self.bandwidth / 1e9:.3g} GB/s")
        return (f"latency {self.latency_s * 1e6:.0f} us, {bw}, fitted on {self.transfers} "
                f"timed transfers of {self.sizes} sizes")

    def to_dict(self) -> dict:
        return {"latency_us": self.latency_s * 1e6,
                "bandwidth_bytes_per_s": self.bandwidth, "sizes": self.sizes,
                "transfers": self.transfers}


def block_message_bytes(batch: int, seq_len: int, hidden: int, microbatches: int) -> float:
    """One stage-to-stage message of the harness's blocks: a microbatch's rows x seq_len x
    hidden float32 values."""
    return batch / microbatches * seq_len * hidden * 4


def activation_bytes(manifest: dict | None, microbatches: int) -> float | None:
    """:func:`block_message_bytes` of a harness run at ``microbatches`` microbatches, whichever
    framework ran the blocks (the manifest's model); None for another model."""
    model = (manifest or {}).get("model") or {}
    dims = [model.get(k) for k in ("batch_size", "seq_len", "hidden")]
    if not all(isinstance(d, int) and d > 0 for d in dims):
        return None
    return block_message_bytes(*dims, microbatches)


def message_bytes(manifest: dict | None, microbatches: int) -> float | None:
    """:func:`activation_bytes` of a torch.distributed.pipelining harness run, the one runtime
    whose holding of its messages the memory model knows; None for any other run."""
    framework = ((manifest or {}).get("framework") or {}).get("name", "torch")
    return activation_bytes(manifest, microbatches) if framework == "torch" else None


def fit_link(samples: Sequence[Sequence[float]]) -> Link | None:
    """Fit ``[(bytes, seconds), ...]`` one-way transfer times; None with fewer than two
    distinct sizes (latency and bandwidth cannot be told apart)."""
    by_size: dict[float, list[float]] = defaultdict(list)
    for nbytes, seconds in samples:
        if nbytes > 0 and seconds >= 0:
            by_size[float(nbytes)].append(float(seconds))
    if len(by_size) < 2:
        return None
    xs = sorted(by_size)
    ys = [median(by_size[x]) for x in xs]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    n = sum(len(v) for v in by_size.values())
    if slope <= 0:
        return Link(latency_s=my, bandwidth=None, sizes=len(xs), transfers=n)
    return Link(latency_s=max(0.0, my - slope * mx), bandwidth=1.0 / slope, sizes=len(xs),
                transfers=n)


def manifest_link(manifest: dict | None) -> Link | None:
    """The link a harness manifest timed (``p2p_link.samples``), fitted; None without one."""
    probe = (manifest or {}).get("p2p_link") or {}
    samples = probe.get("samples")
    if not isinstance(samples, list):
        return None
    try:
        return fit_link([(float(b), float(s)) for b, s in samples])
    except (TypeError, ValueError):
        return None


def scaling_link(manifest: dict | None) -> tuple[Link | None, str]:
    """The timed link that moves a run's delays with its message size, and what it is; None
    and why not, when the run cannot (no timed link, no growth with size, or an unknown
    message size)."""
    link = manifest_link(manifest)
    if link is None:
        return None, "the run timed no link at several sizes"
    if link.bandwidth is None:
        return None, "the timed link showed no growth with size"
    if activation_bytes(manifest, 1) is None:
        return None, "the message size is not known"
    return link, link.describe()

