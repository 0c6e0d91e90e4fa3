"""The engine of `receipts run`: header before the child starts, the child's lifetime (its tee and
signal forwarding live in launch.process), footer, then ingest of the run directory.

Order matters (seed 003, "what the wrapper owns"): the provenance header is in run.log before
the child's first Python import, so a run that dies in `import torch` still has a receipt of what
was launched where. The child runs in its own session so a terminal's Ctrl-C reaches it exactly
once — through us — and the footer is written whatever the child does.

The contract (README "The launch wrapper"):
- the exit code is the child's (128+N when signal N ended it); nothing that happens after the child
  exits — an ingest that fails, a store that stays locked — changes it;
- a command that cannot be found exits 127 (126: found but not executable) with one line, before
  anything is written: nothing ran, so there is nothing to receipt;
- INT, TERM, HUP, QUIT, USR1 and USR2 sent to us go to the child, or, when the child does not
  handle that signal, to its descendants that do (Slurm's `--signal=USR1@T` pre-emption warning must
  reach the training script, also under a torchrun that has no USR1 handler);
- the child's stdout and stderr stay apart (stdout to our stdout, stderr to our stderr), and both
  are teed, whole lines, redacted, into run.log.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import IO

from receipts.launch import provenance
from receipts.launch.process import SignalForwarder, tee
from receipts.capture.recorder import ENV_LAUNCHER
from receipts.capture.telemetry import DEFAULT_INTERVAL_S, TelemetrySampler
from receipts.schema.lane import IdentityClaim
from receipts.schema.receipt_format import RECORD_VERSION, encode
from receipts.errors import ReceiptsError, UsageError
from receipts.schema.registry import Registry, load_registry
from receipts.schema.secrets import EnvRules, env_overlay, load_env_rules, redact, secret_values_in

LOG_NAME = "run.log"
ENV_RUN_DIR = "RECEIPTS_RUN_DIR"   # the child may write traces here; they are ingested with the log
ENV_RUN_ID = "RECEIPTS_RUN_ID"     # the header's run_id when the scheduler names the run
SERIES_NAME = "telemetry.csv"     # every telemetry sample, when the run asks for the series
EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND = 126, 127  # the shell's codes, which Slurm and CI already read


@dataclass
class CommandNotFound(ReceiptsError):
    """The command's first word is not an executable: exit 127 (126 when it exists but cannot run)."""

    message: str
    exit_code: int = EXIT_NOT_FOUND

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class RunResult:
    exit_code: int                    # the child's; 128+N when a signal N ended it (shell convention)
    run_dir: Path
    log_path: Path
    signal_name: str | None = None    # set when the child died of a signal
    ingested: tuple = ()              # receipts.pipeline.IngestOutcome, when ingest ran
    ingest_error: str | None = None   # ingest failed: the log is kept, the store left unchanged
    launch_error: str | None = None   # the OS refused to start the command (exit 126); not ingested


def default_run_dir(*, base: Path, run_name: str | None, command: list[str]) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    name = run_name or f"{stamp}-{Path(command[0]).name}"
    return base / re.sub(r"[^A-Za-z0-9_.\-]+", "_", name)


def resolve_command(command: list[str], *, environ: Mapping[str, str]) -> str:
    """The executable that will run, or UsageError naming the word that is not one."""
    if not command:
        raise UsageError("no command given: put it after `--`, e.g. `receipts run -- python train.py`")
    word = command[0]
    if os.sep in word:
        if os.path.isfile(word) and os.access(word, os.X_OK):
            return word
        if os.path.isfile(word):
            raise CommandNotFound(f"command not executable: {word} (no execute permission)", EXIT_NOT_EXECUTABLE)
        raise CommandNotFound(f"command not found: {word}")
    found = shutil.which(word, path=environ.get("PATH", os.defpath))
    if found is None:
        raise CommandNotFound(f"command not found: {word} (not on PATH)")
    return found


def _nproc(command: list[str]) -> int | None:
    text = " ".join(command)
    m = re.search(r"--nproc[_-]per[_-]node[= ](\d+)", text)
    return int(m.group(1)) if m else None


def build_header(*, command: list[str], environ: Mapping[str, str], cwd: Path, rules: EnvRules,
                 claim: IdentityClaim, run_name: str, tags: tuple[str, ...]) -> dict:
    """Every launcher-side fact, redacted. Pure apart from the probes in launch.provenance."""
    from receipts.ingest.topology import parse_text as parse_topology, rank_map

    gpus = provenance.nvidia_smi_gpus()
    interpreter = provenance.child_interpreter(command)
    software = provenance.software_stack(interpreter=interpreter)
    software["software_source"] = interpreter or f"{sys.executable} (the launcher's: command is not Python)"
    for key in ("driver", "driver_cuda"):
        if gpus.get(key):
            software[key] = gpus[key]
    topo_text = provenance.topology_text()
    topology: dict = {"numa_balancing": provenance.numa_balancing(), "gpus": gpus.get("gpus", [])}
    if topo_text:
        topology["nvidia_smi_topo_m"] = topo_text
        try:
            parsed = parse_topology(topo_text)
        except ReceiptsError as exc:
            topology["topo_error"] = str(exc)
        else:
            topology.update(parsed.to_dict())
            topology["rank_map"] = rank_map(parsed, local_ranks=_nproc(command) or len(parsed.gpus),
                                            visible_devices=environ.get("CUDA_VISIBLE_DEVICES"))
    header = {
        "v": RECORD_VERSION,
        "kind": "header",
        "writer": "receipts run",
        "identity": claim.options(),
        "run_name": run_name,
        # The run key (docs/receipt-format.md): unique per launch, so two jobs started in the same millisecond
        # on one host (an array job, eight single-GPU runs) never supersede each other; RECEIPTS_RUN_ID lets a
        # scheduler name the run (e.g. one id across a requeued job's restarts).
        "run_id": environ.get(ENV_RUN_ID) or uuid.uuid4().hex,
        "hostname": provenance.host_facts()["hostname"],
        "started_at": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
        "command": shlex.join(command),
        "cwd": str(cwd),
        **provenance.git_provenance(cwd=cwd, environ=environ),
        "gpu_model": gpus.get("gpu_model"),
        "gpu_count": gpus.get("gpu_count"),
        "env": env_overlay(environ, rules=rules),
        "software": software,
        "topology": topology,
        "provenance": {
            "alloc_conf": provenance.resolve_alloc_conf(dict(environ), torch_version=software.get("torch")),
            "cpu_count": provenance.host_facts()["cpu_count"],
            "gpu_probe": gpus.get("gpu_probe"),
        },
        "tags": list(tags),
    }
    return redact(header, rules=rules, known_values=secret_values_in(environ, rules=rules))


def run(*, command: list[str], run_dir: Path | None = None, claim: IdentityClaim = IdentityClaim(),
        run_name: str | None = None,
        tags: tuple[str, ...] = (), ingest: bool = True, db_url: str | None = None,
        registry_path: Path | None = None, env_rules_path: Path | None = None,
        environ: Mapping[str, str] | None = None, cwd: Path | None = None,
        echo: IO[bytes] | None = None, echo_err: IO[bytes] | None = None,
        telemetry_interval_s: float | None = DEFAULT_INTERVAL_S, telemetry_series: bool = False) -> RunResult:
    """Launch `command` with a RECEIPT header/footer around its output in run_dir/run.log.

    The child's stdout is echoed to `echo`, its stderr to `echo_err` (None: not echoed); both go
    into run.log. Returns the child's exit code (128+N if signal N ended it). With `ingest`, the run
    directory (log plus *.sqlite / *.nsys-rep / *.pt.trace.json[.gz] found there) goes into the store
    at `db_url`; an ingest failure is reported in the result, never raised over the child's code.
    Raises CommandNotFound (exit 127/126) before writing anything when the command cannot run.

    GPU telemetry (capture/telemetry.py) is sampled every `telemetry_interval_s` seconds (None: not at all) on
    the GPUs the command can see, in a thread of this process, and summarised in the footer; with
    `telemetry_series` every sample is kept in run_dir/telemetry.csv too."""
    environ = dict(os.environ if environ is None else environ)
    cwd = Path(cwd or Path.cwd())
    # One loaded configuration (shipped + ./receipts.toml + --registry), before anything runs: its secret
    # rules redact the header and the tee, and the same registry resolves identity at ingest.
    registry = load_registry(registry_path, cwd=cwd)
    rules = load_env_rules(env_rules_path) if env_rules_path is not None else registry.env_rules
    executable = resolve_command(command, environ=environ)
    run_dir = Path(run_dir) if run_dir else default_run_dir(base=cwd / "runs", run_name=run_name, command=command)
    run_name = run_name or run_dir.name
    log_path = run_dir / LOG_NAME
    if log_path.exists() and log_path.stat().st_size:
        raise UsageError(f"{log_path} already exists: give a new --run-dir or --run-name")
    run_dir.mkdir(parents=True, exist_ok=True)
    known = secret_values_in(environ, rules=rules)

    header = build_header(command=command, environ=environ, cwd=cwd, rules=rules, claim=claim, run_name=run_name,
                          tags=tuple(tags))
    sampler = None
    if telemetry_interval_s is not None:
        sampler = TelemetrySampler(devices=visible_gpu_indices(environ.get("CUDA_VISIBLE_DEVICES")),
                                   interval_s=telemetry_interval_s,
                                   series_path=run_dir / SERIES_NAME if telemetry_series else None)
        if not sampler.start():
            sampler = None
    t0 = time.monotonic()
    child_env = {**environ, ENV_LAUNCHER: "1", ENV_RUN_DIR: str(run_dir.resolve())}
    launch_error = None
    tees: list[threading.Thread] = []
    with open(log_path, "ab", buffering=0) as log:
        log.write(encode(header))
        log_lock = threading.Lock()
        # Handlers go in before the child exists: a signal that lands between spawn and handler
        # installation would otherwise kill us and orphan the child without a footer.
        forwarder = SignalForwarder()
        restore = forwarder.install()
        try:
            try:
                proc = subprocess.Popen([executable, *command[1:]], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, env=child_env, cwd=cwd, start_new_session=True)
            except OSError as exc:  # e.g. ENOEXEC: an executable file with neither a binary format nor a #!
                launch_error = f"cannot execute {executable}: {exc.strerror or exc}"
                returncode = EXIT_NOT_EXECUTABLE
            else:
                forwarder.attach(proc)
                for source, sink in ((proc.stdout, echo), (proc.stderr, echo_err)):
                    tees.append(threading.Thread(target=tee, daemon=True, kwargs=dict(
                        source=source, log=log, log_lock=log_lock, echo=sink, rules=rules, known=known)))
                    tees[-1].start()
                returncode = proc.wait()
        finally:
            restore()
        # A descendant that outlives the child (a daemonised worker) may hold a pipe open:
        # wait a bounded time for the remaining output, then write the footer regardless.
        deadline = time.monotonic() + 30
        for thread in tees:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        sig_name = None
        exit_code = returncode
        if returncode < 0:
            sig_name = signal.Signals(-returncode).name
            exit_code = 128 - returncode
        footer = {"v": RECORD_VERSION, "kind": "footer", "writer": "receipts run", "rank": None,
                  "exit_code": exit_code, "signal": sig_name,
                  "ended_at": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
                  "wall_s": round(time.monotonic() - t0, 3),
                  "output_still_open": any(thread.is_alive() for thread in tees)}
        if launch_error:
            footer["launch_error"] = launch_error
        if sampler is not None:
            footer["telemetry"] = sampler.stop()
        with log_lock:  # the footer is the last line: tees still running (output_still_open) stop here
            log.write(encode(footer))
            log.close()

    ingested: tuple = ()
    ingest_error = None
    if ingest and launch_error is None:
        try:
            ingested = tuple(_ingest(run_dir=run_dir, db_url=db_url, registry=registry, claim=claim,
                                     run_name=run_name, tags=tuple(tags)))
        except ReceiptsError as exc:
            ingest_error = str(exc)
        except Exception as exc:  # noqa: BLE001 - the child's exit code must survive any ingest failure
            ingest_error = f"unexpected {type(exc).__name__}: {exc}"
    return RunResult(exit_code, run_dir, log_path, sig_name, ingested, ingest_error, launch_error)


def visible_gpu_indices(visible_devices: str | None) -> list[int] | None:
    """The NVML indices the command's CUDA_VISIBLE_DEVICES names, in its order (local rank i uses the i-th,
    as in the header's rank_map); None (every GPU) when unset or given as UUIDs; [] when it hides them all."""
    if visible_devices is None:
        return None
    words = [w.strip() for w in visible_devices.split(",") if w.strip()]
    if not words or words == ["-1"]:
        return []  # set but empty (or -1): CUDA shows the job no GPU
    if all(w.isdigit() for w in words):
        return [int(w) for w in words]
    return None


def _ingest(*, run_dir: Path, db_url: str | None, registry: Registry, claim: IdentityClaim, run_name: str,
            tags: tuple[str, ...]) -> list:
    # Imported here: the store and polars are not needed to launch (the GPU box may lack them).
    from receipts.pipeline import ingest_paths
    from receipts.store import open_store

    store = open_store(db_url)
    try:
        return ingest_paths(store, [run_dir], identity=claim,
                            run_name=run_name, registry=registry, tags=tags)
    finally:
        close = getattr(store, "close", None)
        if close is not None:
            close()
