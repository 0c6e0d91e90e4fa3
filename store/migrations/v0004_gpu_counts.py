"""0004: the three GPU counts kept apart.

"GPU count" meant three things: the ranks a profile traced, the devices its host listed, and the job's world
size. receipts.world_size already held the last; this adds receipts.ranks_traced (ranks whose activity a
profile holds; null for a log) and receipts.gpus_on_host (CUDA devices the host listed, display adapters
left out). receipts.gpu_count stays the count machine_class uses (gpus_on_host when known). Older receipts
read null for both: nothing existing changes meaning.
"""

from __future__ import annotations

import sqlalchemy as sa

VERSION = 4
DESCRIPTION = "GPU counts apart: receipts.ranks_traced, receipts.gpus_on_host"


def upgrade(op) -> None:
    op.add_column("receipts", sa.Column("ranks_traced", sa.Integer()))
    op.add_column("receipts", sa.Column("gpus_on_host", sa.Integer()))
