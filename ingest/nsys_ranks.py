"""Which rank each process of an Nsight Systems export is, and the environment the export captured.

rank: processes that launched GPU work, ordered by (lowest deviceId, pid). Overridden by the rank the file itself
states: RANK / SLURM_PROCID / OMPI_COMM_WORLD_RANK / PMI_RANK in the captured environment when the file holds ONE
GPU process (one nsys per rank), or an NVTX thread name 'MPI Rank N' (nsys --trace=mpi) in that process.
"""

from __future__ import annotations

import re

import polars as pl

from receipts.schema.model import EnvVar
from receipts.schema.secrets import EnvRules, env_overlay, load_env_rules, redact, secret_values_in

_RANK_ENV = ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")
_WORLD_ENV = ("WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")


def ranks(devices: pl.DataFrame, environ: dict[str, str],
          thread_ranks: dict[int, int]) -> tuple[dict[int, int], str, int | None, bool]:
    """(rank per pid_key, how ranks were found, world size, whether the file itself stated the ranks);
    `devices`: the (pid_key, device_id) pairs that ran; `thread_ranks`: the rank an 'MPI Rank N' thread name gives
    a process."""
    procs = (devices.group_by("pid_key").agg(pl.col("device_id").min())
             .with_columns(((pl.col("pid_key") // (1 << 24)) % (1 << 24)).alias("pid")).sort("device_id", "pid"))
    pids = procs["pid_key"].to_list()
    env_rank = next((k for k in _RANK_ENV if re.fullmatch(r"[0-9]{1,9}", environ.get(k, ""))), None)
    world_env = next((int(environ[k]) for k in _WORLD_ENV if re.fullmatch(r"[0-9]{1,9}", environ.get(k, ""))), None)
    if len(pids) == 1 and env_rank:
        return ({pids[0]: int(environ[env_rank])}, f"rank from {env_rank} in the captured environment "
                "(one GPU process in this file)", world_env, True)
    if pids and all(p in thread_ranks for p in pids) and len({thread_ranks[p] for p in pids}) == len(pids):
        return ({p: thread_ranks[p] for p in pids}, "rank from the NVTX thread name 'MPI Rank N'", world_env, True)
    return ({p: i for i, p in enumerate(pids)}, "rank = order of the processes that launched GPU work by "
            "(lowest deviceId, pid); no per-process RANK was visible", world_env or len(pids) or None, False)


def parse_environment(text: str | None) -> dict[str, str]:
    """TARGET_INFO_SYSTEM_ENV 'DeviceEnvironment' is 'A=1;B=2;...' (nsys 2024+); a piece without '='
    continues the previous value (a value that itself contained ';')."""
    env: dict[str, str] = {}
    last = None
    for piece in (text or "").split(";"):
        name, eq, value = piece.partition("=")
        if eq and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            env[name], last = value, name
        elif last is not None and piece:
            env[last] += ";" + piece
    return env


def env_evidence(environ: dict[str, str], rules: EnvRules | None = None) -> tuple[EnvVar, ...]:
    """Every captured variable (redacted: by name, by shape, and wherever a secret value recurs in another
    variable) plus the watched knobs that were unset."""
    if not environ:
        return ()
    rules = rules or load_env_rules()
    clean = redact(environ, rules=rules, known_values=secret_values_in(environ, rules=rules))
    out = [EnvVar(name=k, value=v, redacted=v != environ[k]) for k, v in clean.items()]
    out += [EnvVar(name=k, value=None, is_set=False) for k, v in env_overlay(environ, rules=rules).items() if v is None]
    return tuple(sorted(out, key=lambda e: e.name))
