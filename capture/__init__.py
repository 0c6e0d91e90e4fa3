"""Capture inside training: the `Recorder` (NVTX ranges, torch memory readback, RECEIPT lines) and the
provenance facts the launcher and `preflight` collect. Standard library only, never the store: this
runs in the training process, where a missing dataframe stack must never cost a run its receipt.

torch and nvtx are optional (`pip install 'gpu-receipts[capture]'`): importing this package never
imports them; the Recorder looks for them when it is created. The launcher that wraps a training
command and ingests its log is receipts.launch.
"""

from receipts.capture.recorder import Recorder, StepHandle

__all__ = ["Recorder", "StepHandle"]
