"""What stands before a training script's own text on a log line: a launcher's rank label and a logger's prefix.

Parsers whose step lines are anchored at the start of the line put LINE_PREFIX before their pattern; it is
regex syntax both Python's `re` and polars (Rust's regex crate) read the same way.

  launcher  torchrun --tee's `[default0]:` / `[default0]:[rank0]:`, LOG_RANK's `[rank3]: `, srun --label's
            `3: `, any other `[label]:`; RANK_LABEL reads the rank of the first two
  logger    Python logging (the documented default `INFO:root:`, `%(asctime)s - %(levelname)s - `,
            `%(asctime)s - %(name)s - %(levelname)s - `, `%(asctime)s %(levelname)s `, `[%(levelname)s] `,
            `[%(asctime)s][%(name)s][%(levelname)s] - `, `%(asctime)s %(levelname)s [%(filename)s:%(lineno)d] `), loguru's `time | LEVEL | module:function:line - `
            and absl/glog's `I1120 10:00:01.123456 12345 train.py:42] `. A logger prefix always names a
            level: free text before a step line is never taken for one.
"""

from __future__ import annotations

_LEVEL = r"(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|NOTICE|TRACE|SUCCESS)"
_TIME = r"\[?[0-9]{4}-[0-9]{2}-[0-9]{2}[ T][0-9]{2}:[0-9]{2}:[0-9]{2}(?:[.,][0-9]+)?(?:Z|[+-][0-9]{2}:?[0-9]{2})?\]?"
# The rank a line's launcher label names (group 1): torchrun --tee's [default3], LOG_RANK's [rank3].
RANK_LABEL = r"^\[(?:default|rank)([0-9]+)\]"
_LAUNCHER = r"(?:[0-9]+: )?(?:\[(?:default|rank)[0-9]+\]:?\s*)*(?:\[[^\]]*\]:?\s*)?"
_LOGGER = (
    r"(?:"
    + _LEVEL + r":[^:\s]*:(?:[0-9]+:)?\s*"  # logging.basicConfig(): LEVEL:name: (and a :lineno:)
    + r"|[IWEF][0-9]{4} [0-9:.]+\s+[0-9]+ [^\]\s]+\] "  # absl / glog
    + r"|(?:" + _TIME + r"\s*(?:[-|]\s*)?)?(?:\[[^\]]*\]\s*)*(?:[A-Za-z_][\w.<>-]*\s+[-|]\s+)?\[?" + _LEVEL
    + r"\s*\]?\s*(?:[-:|]\s*)?(?:[\w.<>]+(?::[\w.<>]+)*(?::[0-9]+)?\s+-\s+)?"
    + r"(?:\[[\w.<>/-]+(?::[0-9]+)?\]\s*(?:[-:|]\s*)?)?"  # `LEVEL [train.py:88] `: %(filename)s:%(lineno)d
    + r")?"
)
LINE_PREFIX = r"^" + _LAUNCHER + _LOGGER
