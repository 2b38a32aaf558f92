"""The :class:`Schedule` value type and the two stage placements (loop and V)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pipeaudit.actions import Action


@dataclass(frozen=True)
class Schedule:
    """A pipeline schedule: which rank holds which stage and, per rank, the order of its
    compute actions (F, B, or split I/W; global stage index; microbatch).

    ``pairs`` holds the overlapped ``(forward, backward)`` pairs (torch's ``OVERLAP_F_B``),
    each two adjacent actions of one rank's order that run as one unit: the forward, then the
    backward, with both outputs sent to other ranks after the backward.
    """

    name: str
    num_ranks: int
    num_microbatches: int
    chunks: int
    placement: tuple[int, ...]
    orders: tuple[tuple[Action, ...], ...]
    split_backward: bool
    pairs: frozenset[tuple[Action, Action]] = frozenset()

    @property
    def num_stages(self) -> int:
        """Number of global stages, ``num_ranks * chunks``."""
        return len(self.placement)

    @property
    def num_actions(self) -> int:
        """Total number of compute actions over all ranks."""
        return sum(len(o) for o in self.orders)

    def stages_of_rank(self, rank: int) -> tuple[int, ...]:
        """The stages that ``rank`` holds, in increasing order."""
        return tuple(s for s, r in enumerate(self.placement) if r == rank)


def loop_placement(num_ranks: int, chunks: int) -> tuple[int, ...]:
    """Loop placement: stage ``s`` lives on rank ``s % P`` (Megatron/torch interleaved)."""
    return tuple(s % num_ranks for s in range(num_ranks * chunks))


def v_placement(num_ranks: int) -> tuple[int, ...]:
    """V placement for two chunks: rank ``r`` holds stages ``r`` and ``2P-1-r``."""
    return tuple(s if s < num_ranks else 2 * num_ranks - 1 - s for s in range(2 * num_ranks))


def flatten_steps(steps: Sequence[Action | tuple[Action, ...]]
                  ) -> tuple[list[Action], list[tuple[Action, Action]]]:
    """A rank's order written with ``(forward, backward)`` tuples for overlapped pairs, as the
    flat action list and the pairs."""
    flat: list[Action] = []
    pairs: list[tuple[Action, Action]] = []
    for step in steps:
        if isinstance(step, tuple):
            flat += step
            if len(step) == 2:
                pairs.append((step[0], step[1]))
        else:
            flat.append(step)
    return flat, pairs


def as_orders(orders: Sequence[Sequence[Action]]) -> tuple[tuple[Action, ...], ...]:
    """Freeze nested sequences of actions into tuples."""
    return tuple(tuple(o) for o in orders)
