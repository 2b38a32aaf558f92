"""Colours shared by the HTML report and the static plots (Okabe-Ito, colour-blind safe)."""

from __future__ import annotations

#: Fill colour per action kind.
KIND_COLOURS: dict[str, str] = {
    "F": "#0072B2",  # blue: forward
    "B": "#E69F00",  # orange: full backward
    "I": "#D55E00",  # vermillion: backward for inputs
    "W": "#CC79A7",  # reddish purple: backward for weights
}
#: Measured / theory / replay-ideal bars.
MEASURED = "#0072B2"
THEORY = "#555555"
IDEAL = "#009E73"
BUBBLE = "#d9d9d9"
#: One colour per rank or stage line, cycled.
SERIES: tuple[str, ...] = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9",
                           "#F0E442", "#000000")
