"""The one JSON encoder behind every `--json` (cli/context.print_json): typed values written as what they are."""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from receipts.cli.context import print_json


@dataclass(frozen=True)
class _Result:
    verdict: str
    ratio: float


def _printed(value, capsys):
    print_json(value)
    return json.loads(capsys.readouterr().out)  # strict: NaN would not parse back as JSON null


def test_numbers_dates_dataclasses_and_nan(capsys):
    out = _printed({"median": np.float64(12.5), "n": np.int64(3), "cv": float("nan"), "nested": [np.float32(np.inf)],
                    "at": datetime.datetime(2026, 11, 24, 3, 0, tzinfo=datetime.timezone.utc), "path": Path("/x/run.log"),
                    "result": _Result("faster", float("nan")), "ranks": (0, 1)}, capsys)
    assert out == {"median": 12.5, "n": 3, "cv": None, "nested": [None], "at": "2026-11-24T03:00:00+00:00",
                   "path": "/x/run.log", "result": {"verdict": "faster", "ratio": None}, "ranks": [0, 1]}
    assert isinstance(out["n"], int)  # a number, not the string "3" (json.dumps(default=str) wrote strings)


def test_an_unknown_type_is_an_error_not_its_repr(capsys):
    with pytest.raises(TypeError, match="cannot encode object"):
        print_json({"x": object()})
