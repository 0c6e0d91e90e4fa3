"""Replay a PyTorch memory snapshot's trace through a model of the CUDA caching allocator's blocks.

A trace entry carries the size the caller asked for (`orig_size` in CUDACachingAllocator.cpp), while
`memory_allocated()` and its peak count the block the allocator handed out: the request rounded
(512 B steps, or `roundup_power2_divisions`), or the whole free block when what would remain is too small
to split off (1 MiB or less in the large pool, under 512 B in the small one). So the replay keeps the
allocator's block layout, segment by segment, and sizes each allocation as the allocator did: the
free block starting at the allocation's address, split or not by the allocator's own rule.

Blocks allocated before recording began are not in the trace. Their layout at the trace's start is
recovered by playing the trace backwards from the snapshot's `segments` (the layout at the dump): an
allocation undone frees its block (with the free block after it, when the allocation split one off), a
completed free undone takes the freed block back out of the free space around it. One step there is
ambiguous, a block allocated before recording and freed during it whose free space merged with a free
neighbour: it is taken to be its rounded request unless what remains could not have been split off.

Semantics follow torch/csrc/c10/cuda/CUDACachingAllocator.cpp (torch 2.x): `alloc` adds the block to
allocated bytes, `free_requested` takes it off (the block may still wait on other streams),
`free_completed` returns it to the free space, merged with free neighbours; `segment_alloc` /
`segment_free` are cudaMalloc / cudaFree of a whole segment (reserved bytes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

K_MIN_BLOCK = 512               # kMinBlockSize: every block is a multiple of it
K_SMALL_SIZE = 1 << 20          # kSmallSize: requests up to 1 MiB use the small pool
_DIVISION_INTERVALS = 16        # kRoundUpPowerOfTwoIntervals: 1 MiB .. 64 GiB, one setting per power of two


class SettingsError(ValueError):
    """A value of the snapshot's `allocator_settings` of the wrong shape: the key, the value, what was expected."""

    def __init__(self, key: str, value: Any, expected: str) -> None:
        super().__init__(f"{key}: {expected}")
        self.key, self.value, self.expected = key, value, expected


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class AllocatorSettings:
    """What changes block sizes, from the snapshot's `allocator_settings` (absent in older snapshots)."""

    divisions: tuple[int, ...] = (0,) * _DIVISION_INTERVALS   # roundup_power2_divisions per interval
    max_split_bytes: int | None = None                       # max_split_size; None: unlimited
    expandable_segments: bool = False

    @classmethod
    def of(cls, settings: dict[str, Any] | None) -> "AllocatorSettings":
        if not settings:
            return cls()
        table = settings.get("roundup_power2_divisions") or {}
        expected = "a dict of power-of-two interval (an integer) to divisions (an integer >= 0), as torch writes it"
        if not isinstance(table, dict) or not all(_whole(k) or (isinstance(k, str) and k.isdigit())
                                                  for k in table) or not all(_whole(v) and v >= 0
                                                                             for v in table.values()):
            raise SettingsError("roundup_power2_divisions", table, expected)
        ordered = [v for _, v in sorted(((int(k), v) for k, v in table.items()), key=lambda kv: kv[0])]
        divisions = tuple((ordered + [0] * _DIVISION_INTERVALS)[:_DIVISION_INTERVALS])
        split = settings.get("max_split_size")
        if split is not None and not _whole(split):
            raise SettingsError("max_split_size", split, "an integer (bytes; negative: unlimited)")
        return cls(divisions, None if split is None or split < 0 else int(split),
                   bool(settings.get("expandable_segments")))

    def round_size(self, size: int) -> int:
        """CUDACachingAllocator's round_size: the block size a request of `size` bytes asks the pool for."""
        if size < K_MIN_BLOCK:
            return K_MIN_BLOCK
        index = min(max(size.bit_length() - 1 - 20, 0), _DIVISION_INTERVALS - 1)
        divisions = self.divisions[index]
        if divisions > 1 and size > K_MIN_BLOCK * divisions:
            return _next_division(size, divisions)
        return K_MIN_BLOCK * -(-size // K_MIN_BLOCK)

    def splits(self, rounded: int, free_block: int) -> bool:
        """should_split: whether the rest of a free block is split off as a free block of its own."""
        remaining = free_block - rounded
        if rounded <= K_SMALL_SIZE or self.expandable_segments:
            return remaining >= K_MIN_BLOCK
        return (self.max_split_bytes is None or rounded < self.max_split_bytes) and remaining > K_SMALL_SIZE


def _next_division(size: int, divisions: int) -> int:
    if size & (size - 1) == 0:
        return size
    floor = 1 << (size.bit_length() - 1)
    step = floor >> (divisions.bit_length() - 1)
    if step == 0:
        return floor << 1
    rounded = size & ~(step - 1)
    return size if rounded == size else rounded + step


@dataclass(eq=False)
class _Block:
    addr: int
    size: int
    state: str                  # 'free' | 'alloc' (counted as allocated) | 'pending' (freed, awaiting streams)
    prev: "_Block | None" = None
    next: "_Block | None" = None
    category: str = "resident"


class Layout:
    """Blocks by start address, linked within their segment as the allocator links them."""

    def __init__(self) -> None:
        self.blocks: dict[int, _Block] = {}
        self.segments: dict[int, int] = {}      # start address -> total size

    def add_segment(self, addr: int, size: int, blocks: Iterable[tuple[int, str]] = ()) -> None:
        """A segment, as its blocks (size, state) in address order; none: one free block."""
        parts = list(blocks) or [(size, "free")]
        self.segments[addr] = size
        prev, at = None, addr
        for part_size, state in parts:
            block = _Block(at, part_size, state, prev)
            if prev is not None:
                prev.next = block
            self.blocks[at] = block
            prev, at = block, at + part_size

    def drop_segment(self, addr: int) -> bool:
        """Remove a segment and its blocks; False (and nothing removed) when it holds a live block."""
        if addr not in self.segments:
            return False
        block: _Block | None = self.blocks.get(addr)
        chain = []
        while block is not None:
            chain.append(block)
            block = block.next
        clean = all(b.state == "free" for b in chain)
        for b in chain:
            self.blocks.pop(b.addr, None)
        del self.segments[addr]
        return clean

    def split(self, block: _Block, size: int, state: str) -> _Block:
        """Cut `size` bytes off the front of `block` (the rest stays `block`'s old state); returns the front."""
        rest = _Block(block.addr + size, block.size - size, block.state, block, block.next)
        if block.next is not None:
            block.next.prev = rest
        block.next, block.size, block.state = rest, size, state
        self.blocks[rest.addr] = rest
        return block

    def _absorb(self, left: _Block, right: _Block) -> None:
        """`left` takes in its right neighbour `right`, which leaves the segment."""
        left.size += right.size
        left.next = right.next
        if right.next is not None:
            right.next.prev = left
        del self.blocks[right.addr]

    def merge_free(self, block: _Block) -> _Block:
        """free_block's coalescing: a free block absorbs its free neighbours."""
        nxt = block.next
        if nxt is not None and nxt.state == "free":
            self._absorb(block, nxt)
        prev = block.prev
        if prev is not None and prev.state == "free":
            self._absorb(prev, block)
            return prev
        return block

    def containing(self, addr: int) -> _Block | None:
        """The block whose bytes hold `addr` (a walk of its segment: rare, undoing a merged free)."""
        for start, size in self.segments.items():
            if start <= addr < start + size:
                block: _Block | None = self.blocks.get(start)
                while block is not None and not block.addr <= addr < block.addr + block.size:
                    block = block.next
                return block
        return None

    def allocated_bytes(self) -> int:
        return sum(b.size for b in self.blocks.values() if b.state == "alloc")

    def reserved_bytes(self) -> int:
        return sum(self.segments.values())


def layout_at_dump(segments: list[dict[str, Any]]) -> Layout:
    """The snapshot's `segments` as a Layout (block states: active_allocated, active_awaiting_free, inactive)."""
    layout = Layout()
    for seg in segments:
        states = [(int(b["size"]), _STATE.get(str(b["state"]), "alloc")) for b in seg["blocks"]]
        layout.add_segment(int(seg["address"]), int(seg["total_size"]), states)
    return layout


_STATE = {"active_allocated": "alloc", "active_awaiting_free": "pending", "active_pending_free": "pending",
          "inactive": "free"}


@dataclass
class Undo:
    """What playing the trace backwards could not place exactly (counts), for the replay's notes."""

    guessed_frees: int = 0      # a pre-recording block freed in the trace next to free space: size inferred
    misses: int = 0             # an event the layout could not follow (a trace that lost events)


def layout_at_start(segments: list[dict[str, Any]], trace: list[dict[str, Any]],
                    settings: AllocatorSettings) -> tuple[Layout, Undo]:
    """The block layout when recording began: the dump's layout with the trace undone, last event first."""
    layout, undo = layout_at_dump(segments), Undo()
    live: set[int] = set()
    recorded = bytearray(len(trace))   # completed frees of blocks the trace allocated: a guess there is undone with them
    for i, e in enumerate(trace):
        if e["action"] == "alloc":
            live.add(int(e["addr"]))
        elif e["action"] == "free_completed" and int(e["addr"]) in live:
            live.discard(int(e["addr"]))
            recorded[i] = 1
    for i in range(len(trace) - 1, -1, -1):
        e = trace[i]
        action, addr = e["action"], int(e.get("addr", 0))
        block = layout.blocks.get(addr)
        if action == "alloc":
            if block is None or block.state == "free":
                undo.misses += 1
                continue
            block.state = "free"
            layout.merge_free(block)
        elif action == "free_requested":
            if block is not None and block.state == "pending":
                block.state = "alloc"
            else:
                undo.misses += 1
        elif action == "free_completed":
            if _unfree(layout, addr, int(e["size"]), settings, undo) and not recorded[i]:
                undo.guessed_frees += 1
        elif action in ("segment_alloc", "segment_map"):
            if not layout.drop_segment(addr):
                undo.misses += 1
        elif action in ("segment_free", "segment_unmap"):
            layout.add_segment(addr, int(e["size"]))
    return layout, undo


def _unfree(layout: Layout, addr: int, requested: int, settings: AllocatorSettings, undo: Undo) -> bool:
    """Undo a completed free: take the block at `addr` back out of the free block that absorbed it. True when its
    size was a guess (free space after it that the block may or may not have reached)."""
    free = layout.containing(addr)
    if free is None or free.state != "free":
        undo.misses += 1
        return False
    end = free.addr + free.size
    rounded = settings.round_size(requested)
    rest = end - addr - rounded
    # The block ran to the end of the free space unless a free neighbour was merged after it; a neighbour
    # the allocator could not have split off (too small) means there was none.
    size = end - addr if rest <= 0 or not settings.splits(rounded, rounded + rest) else rounded
    if free.addr < addr:
        layout.split(free, addr - free.addr, "free")
        free = layout.blocks[addr]
    if size < free.size:
        layout.split(free, size, "pending")
    else:
        free.state = "pending"
    return rest > 0 and size == rounded


@dataclass
class Replay:
    """The trace played forwards from the start layout: allocated and reserved bytes over time."""

    start_allocated_bytes: int
    peak_allocated_bytes: int = 0
    peak_reserved_bytes: int = 0
    reserved_at_peak_bytes: int = 0
    lowest_allocated_bytes: int = 0
    end_allocated_bytes: int = 0
    peak_index: int | None = None                   # the trace entry that reached the peak; None: before any
    categories_at_peak: dict[str, int] = field(default_factory=dict)
    ooms: int = 0
    unplaced: int = 0                               # allocations the layout could not place: sized by rounding


def replay(start: Layout, trace: Iterable[dict[str, Any]], categories: Sequence[str | None],
           settings: AllocatorSettings) -> Replay:
    """Play `trace` forwards from `start` (modified). `categories[i]`: the category of trace entry i when it is
    an allocation. Blocks of the start layout count as `resident`."""
    layout = start
    allocated, reserved = layout.allocated_bytes(), layout.reserved_bytes()
    by_category: dict[str, int] = {"resident": allocated} if allocated else {}
    out = Replay(allocated, allocated, reserved, reserved, allocated, allocated, None, dict(by_category))
    loose: dict[int, _Block] = {}     # allocations outside the known layout (events the trace lost)
    for i, e in enumerate(trace):
        action = e["action"]
        if action == "alloc":
            addr, rounded = int(e["addr"]), settings.round_size(int(e["size"]))
            block = layout.blocks.get(addr)
            if block is not None and block.state == "free":
                if settings.splits(rounded, block.size):
                    layout.split(block, rounded, "alloc")
                else:
                    block.state = "alloc"
            else:
                out.unplaced += 1
                block = loose[addr] = _Block(addr, rounded, "alloc")
            block.category = categories[i] or "unattributed"
            allocated += block.size
            by_category[block.category] = by_category.get(block.category, 0) + block.size
            if allocated > out.peak_allocated_bytes:
                out.peak_allocated_bytes, out.peak_index, out.reserved_at_peak_bytes = allocated, i, reserved
                out.categories_at_peak = dict(by_category)
        elif action == "free_requested":
            addr = int(e["addr"])
            block = loose.get(addr) or layout.blocks.get(addr)
            if block is None or block.state != "alloc":
                out.unplaced += 1
                block = _Block(addr, settings.round_size(int(e["size"])), "alloc")
            block.state = "pending"
            allocated -= block.size
            by_category[block.category] = by_category.get(block.category, 0) - block.size
            out.lowest_allocated_bytes = min(out.lowest_allocated_bytes, allocated)
        elif action == "free_completed":
            addr = int(e["addr"])
            if loose.pop(addr, None) is None:
                block = layout.blocks.get(addr)
                if block is not None and block.state != "free":
                    block.state = "free"
                    layout.merge_free(block)
        elif action in ("segment_alloc", "segment_map"):
            layout.add_segment(int(e["addr"]), int(e["size"]))
            reserved += int(e["size"])
            out.peak_reserved_bytes = max(out.peak_reserved_bytes, reserved)
        elif action in ("segment_free", "segment_unmap"):
            layout.drop_segment(int(e["addr"]))
            reserved -= int(e["size"])
        elif action == "oom":
            out.ooms += 1
    out.end_allocated_bytes = allocated
    return out
