"""Secrets in URL and flag forms, and the user's own secret patterns, on both writing paths.

Findings: `redis://:PW@host` (empty user), `https://TOKEN@host` (token as the user) and
`--password=PW` inside an env value leaked into receipt_env, run.log and the stored command, from
`receipts run` and from an nsys export's captured environment. And: `[secrets]` in
./receipts.toml or --registry never reached the redactor. Each form is checked on both paths:
`receipts run` (env overlay, the stored command line, the child's teed output) and an nsys export's
TARGET_INFO_SYSTEM_ENV, down to every table of the store.
"""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from cli_helpers import cli
from conftest import realdata
from receipts.schema.registry import load_registry
from receipts.schema.secrets import load_env_rules, redact, secret_values_in

RECEIPTS = shutil.which("receipts", path=str(Path(sys.executable).parent)) or "receipts"


def _secret(form: str) -> str:
    return "Zk" + hashlib.sha1(form.encode()).hexdigest()[:14]  # unique per form, no shape of its own


# form -> (text holding the secret, a part of the text that must survive redaction)
FORMS = {
    "url_empty_user": ("redis://:{s}@cache.internal:6379/0", "@cache.internal:6379/0"),
    "url_token_as_user": ("https://{s}@git.internal/org/repo.git", "@git.internal/org/repo.git"),
    "url_user_password": ("postgresql://trainer:{s}@db.internal:5432/runs", "@db.internal:5432/runs"),
    "url_password_with_at": ("postgresql://trainer:p@{s}@db.internal/runs", "@db.internal/runs"),
    "flag_equals": ("--password={s}", "--password="),
    "flag_space": ("--token {s}", "--token "),
    "flag_prefixed": ("--wandb-api-key={s} --lr 3e-4", "--lr 3e-4"),
    "flag_quoted": ("--db-password '{s}'", "--db-password "),
    "mysql_u_p": ("mysql -u trainer -p{s} runs", "mysql -u trainer -p"),
    "sshpass_p": ("sshpass -p {s} ssh node1", "ssh node1"),
    "libpq_password": ("host=db.internal password={s} dbname=runs", "dbname=runs"),
    "query_token": ("https://hub.internal/api?access_token={s}&page=2", "&page=2"),
}
TEXTS = {form: text.format(s=_secret(form)) for form, (text, _) in FORMS.items()}
# The user's own rules, in ./receipts.toml or --registry: a value shape and a name word.
USER_TOML = """
[secrets]
value_patterns = ['corpvault-[0-9a-f]{12}']
name_patterns = ["VAULTISH"]
"""
USER_SECRETS = {"shape": "corpvault-0123456789ab", "name": "plain-looking-value-42"}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_each_form_is_redacted_and_its_context_kept(form):
    rules = load_env_rules()
    out = redact(TEXTS[form], rules=rules)
    assert _secret(form) not in out
    assert FORMS[form][1] in out
    # as an env value: by shape, and again wherever the value recurs in free text
    env = {"SOME_VAR": TEXTS[form]}
    known = secret_values_in(env, rules=rules)
    assert _secret(form) not in str(redact(env, rules=rules, known_values=known))
    password = "p@" + _secret(form) if form == "url_password_with_at" else _secret(form)
    assert _secret(form) not in redact(f"child echoes {password}", rules=rules, known_values=known)


@pytest.mark.parametrize("text", ["--tokenizer gpt2", "--max-tokens 512", "mkdir -p /tmp/x", "ssh -p 22 node1",
                                  "torchrun --nproc_per_node 8 train.py", "--token --next-flag",
                                  "git@github.com:org/repo.git", "https://github.com/org/repo",
                                  "step 00100/21400 (0.47%) | loss: 3.14 | dt: 456.78ms | tok/sec: 1,148,000"])
def test_ordinary_text_is_left_alone(text):
    assert redact(text, rules=load_env_rules()) == text


def test_user_secret_patterns_reach_the_rules_through_the_registry(tmp_path):
    (tmp_path / "receipts.toml").write_text(USER_TOML)
    for registry in (load_registry(cwd=tmp_path), load_registry(tmp_path / "receipts.toml", cwd=tmp_path / "none")):
        env = {"NCCL_X": USER_SECRETS["shape"], "MY_VAULTISH_NAME": USER_SECRETS["name"]}
        out = redact(env, rules=registry.env_rules, known_values=secret_values_in(env, rules=registry.env_rules))
        assert out == {"NCCL_X": "<redacted>", "MY_VAULTISH_NAME": "<redacted>"}
    assert redact(env, rules=load_registry(cwd=tmp_path / "none").env_rules) == env  # shipped rules alone do not


def _store_text(db: Path) -> str:
    """Every value of every table of a DuckDB store, as one string."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        tables = [t for (t,) in con.execute("SELECT table_name FROM information_schema.tables "
                                            "WHERE table_schema = 'main'").fetchall()]
        return "\n".join(str(con.execute(f'SELECT * FROM "{t}"').fetchall()) for t in tables)
    finally:
        con.close()


def _planted_env() -> dict[str, str]:
    # Under watched prefixes, so the env overlay records them (NCCL_*, CUDA_*, TORCHINDUCTOR_*)
    env = {f"NCCL_FORM_{form.upper()}": text for form, text in TEXTS.items()}
    env["TORCHINDUCTOR_SHAPE"] = USER_SECRETS["shape"]
    env["NCCL_VAULTISH_NAME"] = USER_SECRETS["name"]
    return env


@pytest.mark.parametrize("where", ["cwd", "registry"])
def test_receipts_run_redacts_every_form_in_env_command_and_output(tmp_path, where):
    import os

    (tmp_path / "user.toml").write_text(USER_TOML)
    if where == "cwd":
        (tmp_path / "receipts.toml").write_text(USER_TOML)
    extra = ["--registry", str(tmp_path / "user.toml")] if where == "registry" else []
    planted = _planted_env()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "TORCHINDUCTOR_"))}, **planted}
    script = "import os, sys\nfor k in sorted(os.environ):\n    print(k, os.environ[k])\nprint(sys.argv)\n"
    args = [v for text in TEXTS.values() for v in text.split()] + [USER_SECRETS["shape"]]
    db = tmp_path / "store.duckdb"
    proc = subprocess.run([RECEIPTS, "--db", str(db), *extra, "run", "--quiet", "--host-lineage", "h200-device-x2",
                           "--preset", "toy_fsdp2_v1", "--regime", "fsdp2/no-compile", "--run-dir", str(tmp_path / "r"),
                           "--", sys.executable, "-c", script, *args], env=env, capture_output=True, text=True,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    log = (tmp_path / "r" / "run.log").read_text()
    stored = _store_text(db)
    assert "NCCL_FORM_URL_EMPTY_USER" in stored and "TORCHINDUCTOR_SHAPE" in stored  # the knobs are recorded
    for form in FORMS:
        assert _secret(form) not in log, f"{form} leaked into run.log"
        assert _secret(form) not in stored, f"{form} leaked into the store"
    for kind, value in USER_SECRETS.items():
        assert value not in log, f"user secret ({kind}) leaked into run.log"
        assert value not in stored, f"user secret ({kind}) leaked into the store"
    assert "cache.internal" in log  # a URL keeps its host


def _export_with_environment(tmp_path: Path, environment: dict[str, str]) -> Path:
    path = tmp_path / "profile.sqlite"
    shutil.copyfile(realdata("nsys", "mock.sqlite"), path)
    with sqlite3.connect(path) as db:
        text = db.execute("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'DeviceEnvironment'").fetchone()[0]
        planted = ";".join(f"{k}={v}" for k, v in environment.items())
        db.execute("UPDATE TARGET_INFO_SYSTEM_ENV SET value = ? WHERE name = 'DeviceEnvironment'",
                   [planted + ";" + text])
    return path


@pytest.mark.parametrize("where", ["cwd", "registry"])
def test_nsys_captured_environment_redacts_every_form(tmp_path, monkeypatch, where):
    export = _export_with_environment(tmp_path, {**_planted_env(), "PLAIN_URL": TEXTS["url_token_as_user"]})
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "user.toml").write_text(USER_TOML)
    if where == "cwd":
        (work / "receipts.toml").write_text(USER_TOML)
    monkeypatch.chdir(work)
    db = str(tmp_path / "store.duckdb")
    extra = ["--registry", str(tmp_path / "user.toml")] if where == "registry" else []
    result = cli(db, *extra, "ingest", str(export), "--host-lineage", "h200-device-x1", "--preset", "toy_fsdp2_v1",
                 "--regime", "fsdp2/no-compile")
    assert result.exit_code == 0, result.output
    stored = _store_text(Path(db))
    assert "NCCL_FORM_FLAG_EQUALS" in stored and "PLAIN_URL" in stored
    for form in FORMS:
        assert _secret(form) not in stored, f"{form} leaked into the store"
    for kind, value in USER_SECRETS.items():
        assert value not in stored, f"user secret ({kind}) leaked into the store"
