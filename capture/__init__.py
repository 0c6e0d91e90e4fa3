"""Capture at the source: the in-training `Recorder` and the `receipts run` launcher.

torch and nvtx are optional (`pip install receipts[capture]`): importing this package never
imports them; the Recorder looks for them when it is created.
"""

from receipts.capture.recorder import Recorder, StepHandle

__all__ = ["Recorder", "StepHandle"]
