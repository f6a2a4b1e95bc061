"""The classifier's decision bars as data: per category, the score that flags and the score that blocks.

`python -m training.safety.eval --calibrate` writes `data/calibration.json` from held-out benign text;
the guards read it (`SafetyPolicy` takes its defaults from here, the services may name another file).
A new classifier gets new bars by rerunning the eval, not by editing code. A score between a category's
`flag_at` and `block_at` is borderline: it flags (recorded, shown to operators) and the request goes on.
"""

from __future__ import annotations

import functools
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

CALIBRATION_PATH = Path(__file__).resolve().parent / "data" / "calibration.json"


class Bar(BaseModel):
    """One category's bars in one direction; `block_at: None` never blocks."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    flag_at: float = Field(ge=0.0, le=1.0)
    block_at: float | None = Field(default=None, ge=0.0, le=1.0)


class CalibrationSet(BaseModel):
    """A benign set the bars were chosen on, and how many of its texts it holds."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    n: int


class Calibration(BaseModel):
    """The bars for one classifier version, and how they were chosen."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    classifier: str  # the classifier version these scores mean something for
    written: str  # date (UTC) the eval wrote the file
    command: str
    method: str
    # Requests: at most this share of the calibration texts may be blocked by the classifier...
    target_fpr: float = Field(ge=0.0, le=1.0)
    # ...and a block needs the score to clear the highest calibration score it must let through by this much.
    margin: float = Field(ge=0.0, le=1.0)
    sets: list[CalibrationSet] = Field(default_factory=list)
    # The learned categories on requests (user, file, tool and memory text) and on the model's answers.
    requests: dict[str, Bar]
    answers: dict[str, Bar]


def read_calibration(path: Path) -> Calibration:
    return Calibration.model_validate_json(path.read_text(encoding="utf-8"))


@functools.cache
def shipped_calibration() -> Calibration:
    """The bars that ship with the package's classifier (read once per process)."""
    return read_calibration(CALIBRATION_PATH)


def write_calibration(cal: Calibration, path: Path = CALIBRATION_PATH) -> None:
    path.write_text(cal.model_dump_json(indent=2) + "\n", encoding="utf-8")
