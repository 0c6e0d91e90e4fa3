"""The in-training recorder: NVTX `step N` ranges, CUDA-event step times, memory readback,
RECEIPT lines (format v1, ingest/native.py) written whole by each rank.

Where it synchronises, and why
------------------------------
- Never per step. `step()` records a CUDA event on the current stream at entry and exit
  (cudaEventRecord: asynchronous) and reads the allocator's host-side counters
  (memory_allocated / memory_reserved: no device round trip). A loss given as a CUDA tensor is
  copied into pinned host memory with non_blocking=True *before* the exit event, so once that
  event has completed the value is readable without another sync.
- Every 8 steps it *polls* earlier steps' exit events with `Event.query()` (cudaEventQuery:
  non-blocking) and queues the records of the steps the GPU has finished. Queued lines are
  written in batches of whole lines (under 3.5 KB, one os.write). Lines therefore appear some
  steps after the step ran, in step order; a hard kill loses at most one batch (~12 steps), and
  the missing footer then marks the receipt as ended early.
- It blocks (Event.synchronize on the oldest pending step) only when more than
  `max_pending_steps` steps are still unfinished on the GPU — the CPU cannot normally run that
  far ahead, so this bounds memory rather than timing anything.
- `close()` (the footer) synchronises the remaining exit events once, then reads
  max_memory_allocated / max_memory_reserved.

Timing labels: with CUDA, `step_ms` is the exit-minus-entry event time on the current stream
(`timing: "cuda_event"`); `host_ms` (perf_counter around the `with` body) is always recorded too.
Without CUDA there is no GPU time to measure: `step_ms` is the host time and every record says
`timing: "host"`, and the header says `gpu_count: 0` — numbers are labelled, never faked.

Rank safety: every record carries `rank`, and each batch is one `os.write()` of complete lines
of at most 3.5 KB. On a pipe (torchrun's inherited stdout) writes up to PIPE_BUF (4096 bytes) are
atomic; on a file the recorder opens it with O_APPEND, whose writes land whole at the end. So 8
ranks sharing one stdout or one file never interleave mid-line.
"""

from __future__ import annotations

import atexit
import contextlib
import math
import os
import socket
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

from receipts.capture import memory as _memory
from receipts.capture import recipe as _recipe
from receipts.capture.telemetry import DEFAULT_INTERVAL_S, TelemetrySampler
from receipts.schema.receipt_format import RECORD_VERSION, WARMUP_PHASES, encode  # the format has one owner

# Step lines are written in batches: one os.write() of whole lines, kept under PIPE_BUF (4096 on
# Linux) so a batch on a shared pipe is as atomic as a single line. Measured on the H200 box, a
# write() per step cost more than everything else the recorder does on a launch-bound loop.
_BATCH_BYTES = 3584
_POLL_EVERY_STEPS = 8   # query finished steps' events every this many steps, not every step
ENV_LAUNCHER = "RECEIPTS_LAUNCHER"  # set by `receipts run` in the child: the header is already written


@dataclass
class StepHandle:
    """What `with rec.step(n) as s:` yields: set `s.loss` (float or tensor) and `s.tokens`
    (tokens THIS rank processed in the step: `tokens_per_s` is per rank, the store sums ranks)."""

    step: int
    loss: Any = None
    tokens: int | None = None


@dataclass
class _Pending:
    handle: StepHandle
    host_ms: float
    start: Any = None            # torch.cuda.Event
    end: Any = None
    loss_buf: Any = None         # pinned CPU tensor filled by a non_blocking copy
    allocated_bytes: int | None = None
    reserved_bytes: int | None = None


@dataclass
class _Phase:
    name: str
    t0: float
    first_step: int | None = None
    last_step: int | None = None
    extra: dict = field(default_factory=dict)


class Recorder:
    """`rec = Recorder()`; `with rec.step(n) as s: ...`; `with rec.phase("compile"): ...`; `rec.close()`.

    log: None (stdout), a path (opened O_APPEND: several ranks may share it), or an open stream.
    rank / world_size: None reads RANK / WORLD_SIZE (torchrun sets them); LOCAL_RANK likewise.
    use_cuda: None = when torch is importable and CUDA is available.
    telemetry_interval_s: seconds between GPU telemetry samples of this rank's GPU (capture/telemetry.py, a
    daemon thread; the footer carries the summary); None: none. Under `receipts run` the launcher samples
    every GPU of the job instead, and the recorder does not.
    """

    def __init__(self, log: str | Path | IO[str] | None = None, *, rank: int | None = None,
                 world_size: int | None = None, use_cuda: bool | None = None, max_pending_steps: int = 64,
                 tokens_per_step: int | None = None, memory_every_steps: int = 1,
                 header_facts: dict | None = None, telemetry_interval_s: float | None = DEFAULT_INTERVAL_S) -> None:
        self.rank = int(os.environ.get("RANK", "0")) if rank is None else int(rank)
        self.world_size = int(os.environ.get("WORLD_SIZE", "1")) if world_size is None else int(world_size)
        self.local_rank = int(os.environ.get("LOCAL_RANK", str(self.rank)))
        self.max_pending_steps = max_pending_steps
        self.tokens_per_step = tokens_per_step
        self.memory_every_steps = memory_every_steps  # 0 = never read memory per step (footer still does)
        self._free_events: list = []
        self._loss_ring = None
        self._buf: list[bytes] = []
        self._buf_bytes = 0
        self._loss_slot = 0
        self._torch = _optional_torch()
        cuda_ok = bool(self._torch is not None and self._torch.cuda.is_available())
        self.use_cuda = cuda_ok if use_cuda is None else (use_cuda and cuda_ok)
        self._nvtx_push, self._nvtx_pop = _nvtx_functions(self._torch)
        self._fd, self._stream, self._owned_fd = _open_log(log)
        self._pending: deque[_Pending] = deque()
        self._phases: list[_Phase] = []
        self._current_step: int | None = None
        self._closed = False
        self._geometry: dict[str, Any] | None = None   # watch_memory: the footer's `memory`, filled as it is measured
        self._watch_handles: list = []
        self._run_peaks: tuple[int, int] | None = None  # the peaks before the steady reset (the footer's are the run's)
        self._resident_bytes: int | None = None         # the least allocated at a steady step's end
        self._recipe: dict[str, Any] = {}                # record_recipe: the footer's `recipe`
        self._telemetry: TelemetrySampler | None = None
        self._write_header(header_facts or {})
        if self.use_cuda and telemetry_interval_s is not None and not os.environ.get(ENV_LAUNCHER):
            bus = _pci_bus_id(self._torch.cuda.get_device_properties(self._torch.cuda.current_device()))
            sampler = TelemetrySampler(devices=[bus] if bus else [self._torch.cuda.current_device()],
                                       interval_s=telemetry_interval_s)
            self._telemetry = sampler if sampler.start() else None
        atexit.register(self._close_at_exit)

    # ----------------------------------------------------------------- records
    def _emit(self, record: dict, *, flush: bool = True) -> None:
        """Queue one whole line; write the queue when `flush`, or when one more line could push
        a single write past PIPE_BUF (then the queue goes first, so each write stays atomic)."""
        data = encode(_finite(record))
        if self._buf_bytes + len(data) > _BATCH_BYTES:
            self._flush()
        self._buf.append(data)
        self._buf_bytes += len(data)
        if flush:
            self._flush()

    def _flush(self) -> None:
        if not self._buf:
            return
        data = b"".join(self._buf)
        self._buf.clear()
        self._buf_bytes = 0
        if self._fd is None:
            self._stream.write(data.decode("utf-8"))
            self._stream.flush()
            return
        if self._stream is not None:
            self._stream.flush()  # the script's own prints, buffered before these lines, go first
        while data:
            written = os.write(self._fd, data)  # one call for whole lines: see module docstring
            data = data[written:]

    def _write_header(self, facts: dict) -> None:
        rec: dict = {"v": RECORD_VERSION, "kind": "header", "rank": self.rank, "local_rank": self.local_rank,
                     "world_size": self.world_size, "writer": "receipts.capture",
                     "timing": "cuda_event" if self.use_cuda else "host"}
        torch = self._torch
        if self.use_cuda:
            dev = torch.cuda.current_device()
            props = torch.cuda.get_device_properties(dev)
            rec["gpu_model"] = props.name
            rec["rank_device"] = {"rank": self.rank, "local_rank": self.local_rank, "cuda_index": dev,
                                  "name": props.name, "total_memory_bytes": int(props.total_memory),
                                  "pci_bus_id": _pci_bus_id(props)}
        if not os.environ.get(ENV_LAUNCHER):
            # Standalone use: no launcher header precedes this one, so carry the machine facts.
            # (Under `receipts run` these keys are left out so the launcher's header is not overwritten.)
            rec["hostname"] = socket.gethostname()
            rec["started_at"] = _now()
            has_cuda = torch is not None and torch.cuda.is_available()
            rec["gpu_count"] = torch.cuda.device_count() if has_cuda else 0
            if torch is not None:
                rec["software"] = {"torch": torch.__version__, "torch_cuda": torch.version.cuda}
        rec.update(facts)
        self._emit(rec)

    # ------------------------------------------------------------------- steps
    @contextlib.contextmanager
    def step(self, n: int, *, tokens: int | None = None):
        handle = StepHandle(int(n), tokens=tokens if tokens is not None else self.tokens_per_step)
        label = f"step {handle.step}"
        self._nvtx_push(label)
        pending = _Pending(handle, 0.0)
        if self.use_cuda:
            pending.start, pending.end = self._event(), self._event()
            pending.start.record()
        self._current_step = handle.step
        for ph in self._phases:
            ph.first_step = handle.step if ph.first_step is None else ph.first_step
        t0 = time.perf_counter()
        try:
            yield handle
        finally:
            pending.host_ms = (time.perf_counter() - t0) * 1000.0
            if self.use_cuda:
                pending.loss_buf = self._stage_loss(handle.loss)
                pending.end.record()
                if self.memory_every_steps and handle.step % self.memory_every_steps == 0:
                    pending.allocated_bytes, pending.reserved_bytes = self._memory_now()
                    if self._geometry and "parameters_bytes" in self._geometry:
                        held = pending.allocated_bytes
                        self._resident_bytes = held if self._resident_bytes is None else min(self._resident_bytes, held)
            self._nvtx_pop()
            self._current_step = None
            for ph in self._phases:
                ph.last_step = handle.step
            self._pending.append(pending)
            if len(self._pending) >= _POLL_EVERY_STEPS:
                self._drain(block=False)

    def _event(self):
        # Recycled: creating a CUDA event per step costs a driver call each time.
        return self._free_events.pop() if self._free_events else self._torch.cuda.Event(enable_timing=True)

    def _memory_now(self) -> tuple[int, int]:
        """Current allocated/reserved bytes from the caching allocator's host-side counters.
        memory_stats_as_nested_dict is one call; torch.cuda.memory_allocated() and
        memory_reserved() each build and flatten the whole stats dict (~70 us apiece on
        torch 2.11, measured on the H200 box), which a CPU-bound loop would feel."""
        stats = self._torch.cuda.memory_stats_as_nested_dict()
        return int(stats["allocated_bytes"]["all"]["current"]), int(stats["reserved_bytes"]["all"]["current"])

    def _stage_loss(self, loss: Any) -> Any:
        """Queue a device->pinned-host copy of a CUDA loss; returns the slot to read later.
        Slots come from one pinned ring allocated once (a pinned allocation per step goes through
        the host caching allocator's event bookkeeping); a slot is reused only after its step
        has been drained, which `max_pending_steps` guarantees."""
        torch = self._torch
        if loss is None or not isinstance(loss, torch.Tensor) or not loss.is_cuda:
            return None
        ring = self._loss_ring
        if ring is None:
            ring = self._loss_ring = torch.zeros(self.max_pending_steps + 2, dtype=torch.float32, pin_memory=True)
        slot = ring[self._loss_slot]
        self._loss_slot = (self._loss_slot + 1) % len(ring)
        slot.copy_(loss.detach().reshape(()), non_blocking=True)
        return slot

    def _drain(self, *, block: bool) -> None:
        while self._pending:
            p = self._pending[0]
            if p.end is not None:
                must_wait = block or len(self._pending) > self.max_pending_steps
                if not p.end.query():
                    if not must_wait:
                        return
                    p.end.synchronize()
            self._pending.popleft()
            self._emit(self._step_record(p), flush=False)
            if p.end is not None:
                self._free_events += (p.start, p.end)

    def _step_record(self, p: _Pending) -> dict:
        h = p.handle
        if p.end is not None:
            step_ms, timing = float(p.start.elapsed_time(p.end)), "cuda_event"
        else:
            step_ms, timing = p.host_ms, "host"
        loss = h.loss
        if p.loss_buf is not None:
            loss = float(p.loss_buf.item())  # CPU tensor, filled before `end` completed: no sync
        elif loss is not None and not isinstance(loss, (int, float)):
            loss = float(loss)  # a CPU tensor or numpy scalar
        rec = {"v": RECORD_VERSION, "kind": "step", "step": h.step, "rank": self.rank, "step_ms": step_ms,
               "host_ms": p.host_ms, "timing": timing, "loss": loss,
               "tokens_per_s": (h.tokens / (step_ms / 1000.0)) if h.tokens and step_ms > 0 else None,
               "allocated_bytes": p.allocated_bytes, "reserved_bytes": p.reserved_bytes}
        return rec

    # ------------------------------------------------------------ phases, NVTX
    @contextlib.contextmanager
    def phase(self, name: str, **extra: Any):
        """Badput outside steady-state steps: compile, warmup, checkpoint, eval. Recorded as one
        `phase` record with first_step/last_step = the steps that ran inside it (the enclosing
        step when used inside one; null when none did) and duration_ms (host clock)."""
        ph = _Phase(name, time.perf_counter(), first_step=self._current_step, last_step=self._current_step,
                    extra=extra)
        self._phases.append(ph)
        self._nvtx_push(name)
        try:
            yield
        finally:
            self._nvtx_pop()
            self._phases.remove(ph)
            self._drain(block=False)  # steps that ran inside the phase go out before its record
            self._emit({"v": RECORD_VERSION, "kind": "phase", "phase": name, "rank": self.rank,
                        "first_step": ph.first_step, "last_step": ph.last_step,
                        "duration_ms": (time.perf_counter() - ph.t0) * 1000.0, "timing": "host", **ph.extra})

    @contextlib.contextmanager
    def block(self, name: str):
        """An NVTX range for a block family (ablock / eblock / mblock / rblock); no RECEIPT line."""
        self._nvtx_push(name)
        try:
            yield
        finally:
            self._nvtx_pop()

    # ------------------------------------------------------------------ memory geometry
    def watch_memory(self, optimizer: Any, model: Any = None, *, activations: bool = False,
                     activation_steps: int = 8) -> None:
        """Measure this rank's memory geometry for the footer's `memory` record (docs/receipt-format.md).

        After the optimizer's first step outside a warm-up phase (a post-step hook, before the gradients are
        zeroed): the bytes of the local shards of the parameters, gradients and optimizer state
        (capture/memory.py: DTensor-aware, read from metadata, no device sync); the allocator's peaks are reset
        there, so the record's peaks are the steady steps'. The footer's own peaks stay the whole run's.
        `activations` (needs `model`): the allocated bytes a forward of `model` leaves behind (read from the
        allocator's host counters around the call, no sync), the largest of the next `activation_steps`
        forwards (the hooks idle after them). At close: the allocator's retries and OOMs and the
        device's HBM."""
        self.record_recipe(optimizer, model)
        if not self.use_cuda or self._geometry is not None:
            return
        geometry: dict[str, Any] = {}
        self._geometry = geometry
        # Hooks are left in place once done (a check of a flag): torch iterates an optimizer's post-step hooks
        # over the live dict, so a hook that removed itself would break the step it runs in.
        self._watch_handles.append(optimizer.register_step_post_hook(self._after_optimizer_step))
        if activations and model is not None:
            before: list[int] = []

            def pre(module, args) -> None:
                # steady (the optimizer has stepped), and not yet activation_steps forwards measured
                if "parameters_bytes" in geometry and geometry.get("activation_forwards", 0) < activation_steps:
                    before.append(self._memory_now()[0])

            def post(module, args, output) -> None:
                if before:
                    held = self._memory_now()[0] - before.pop()
                    geometry["activations_bytes"] = max(held, geometry.get("activations_bytes", 0))
                    geometry["activation_forwards"] = geometry.get("activation_forwards", 0) + 1

            # Around FSDP's own hooks: fully_shard prepends its pre-forward hook (the all-gather of the unsharded
            # parameters) and appends its post-forward one (their reshard). Ours go outside both, so the
            # measure is the allocator's delta across the whole forward call; inside them "before" would
            # already hold unsharded parameters that are freed before "after". Call this after fully_shard.
            self._watch_handles += [model.register_forward_pre_hook(pre, prepend=True),
                                    model.register_forward_hook(post)]

    def record_recipe(self, optimizer: Any = None, model: Any = None, **facts: Any) -> None:
        """The recipe the footer carries (`recipe`: flat name -> scalar, capture/recipe.py): the optimizer's
        class and settings, the model's dtypes, mesh, checkpointed modules and compile state, and any `facts`
        given (names as written, e.g. `data.seq_len=4096`). Compared field by field as recipe drift."""
        found: dict[str, Any] = {}
        if optimizer is not None:
            found.update(_recipe.optimizer_facts(optimizer))
        if model is not None:
            found.update(_recipe.model_facts(model))
        found.update({k: _recipe._scalar(v) for k, v in facts.items()})
        self._recipe.update(found)

    def _after_optimizer_step(self, optimizer, args, kwargs) -> None:
        geometry = self._geometry
        if geometry is None or "parameters_bytes" in geometry or any(
                ph.name.lower() in WARMUP_PHASES for ph in self._phases):
            return
        geometry.update(_memory.buckets(optimizer))
        geometry["measured_after_step"] = self._current_step
        cuda = self._torch.cuda
        self._run_peaks = (int(cuda.max_memory_allocated()), int(cuda.max_memory_reserved()))
        cuda.reset_peak_memory_stats()  # host-side: the peaks from here on are the steady steps'

    def _memory_record(self) -> dict[str, Any] | None:
        """The footer's `memory`: the watched geometry, the steady peaks and the allocator's counters."""
        if self._geometry is None:
            return None
        cuda = self._torch.cuda
        stats = cuda.memory_stats()
        geometry = dict(self._geometry)
        geometry.pop("activation_forwards", None)
        return {**geometry,
                "peak_allocated_bytes": int(cuda.max_memory_allocated()),
                "peak_reserved_bytes": int(cuda.max_memory_reserved()),
                "peak_window": "steady" if self._run_peaks is not None else "run",
                "resident_bytes": self._resident_bytes,
                "alloc_retries": int(stats.get("num_alloc_retries", 0)), "ooms": int(stats.get("num_ooms", 0)),
                "device_total_bytes": int(cuda.get_device_properties(cuda.current_device()).total_memory)}

    # ------------------------------------------------------------------ footer
    def close(self, *, exit_code: int | None = None) -> dict:
        """Flush pending steps (the one synchronisation) and write this rank's footer."""
        if self._closed:
            return {}
        self._drain(block=True)
        rec: dict = {"v": RECORD_VERSION, "kind": "footer", "rank": self.rank, "ended_at": _now(),
                     "peak_allocated_bytes": None, "peak_reserved_bytes": None, "writer": "receipts.capture"}
        if self.use_cuda:
            cuda = self._torch.cuda
            memory = self._memory_record()
            run = self._run_peaks or (0, 0)  # the peaks before watch_memory's steady reset, when it made one
            rec["peak_allocated_bytes"] = max(int(cuda.max_memory_allocated()), run[0])
            rec["peak_reserved_bytes"] = max(int(cuda.max_memory_reserved()), run[1])
            if memory is not None:
                rec["memory"] = memory
            if self._telemetry is not None:
                rec["telemetry"] = self._telemetry.stop()
        else:
            rec["gpu_count"] = 0
        if self._recipe:
            rec["recipe"] = dict(self._recipe)
        if exit_code is not None:
            rec["exit_code"] = exit_code
        self._emit(rec)
        self._closed = True
        if self._owned_fd is not None:
            os.close(self._owned_fd)
        return rec

    def _close_at_exit(self) -> None:
        if not self._closed:
            with contextlib.suppress(Exception):
                self.close()

    def __enter__(self) -> "Recorder":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()


def _optional_torch():
    try:
        import torch  # optional: pip install 'gpu-receipts[capture]'
    except ImportError:
        return None
    return torch


def _nvtx_functions(torch):
    """nvtx (the NVIDIA package) when installed, else torch.cuda.nvtx, else no-ops. Both write
    to NVTX's default domain, so nsys shows the range text exactly as given ('step 12')."""
    try:
        import nvtx  # optional

        return (lambda msg: nvtx.push_range(message=msg)), (lambda: nvtx.pop_range())
    except ImportError:
        pass
    if torch is not None and torch.cuda.is_available():
        return torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop
    return (lambda msg: None), (lambda: None)


def _open_log(log) -> tuple[int | None, Any, int | None]:
    """(fd for os.write or None, stream to flush or write to, fd we own and must close)."""
    if log is None:
        log = sys.stdout
    if isinstance(log, (str, Path)):
        fd = os.open(str(log), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        return fd, None, fd
    try:
        return log.fileno(), log, None
    except (AttributeError, OSError, ValueError):
        return None, log, None  # e.g. io.StringIO or pytest's capture: plain write()


def _pci_bus_id(props) -> str | None:
    bus = getattr(props, "pci_bus_id", None)
    if bus is None:
        return None
    return f"{getattr(props, 'pci_domain_id', 0):08X}:{bus:02X}:{getattr(props, 'pci_device_id', 0):02X}.0"


def _finite(obj: Any) -> Any:
    """NaN/inf are not JSON: a diverged loss is recorded as null rather than breaking the line."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")
