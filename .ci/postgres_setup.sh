#!/usr/bin/env bash
# Idempotent: make a local PostgreSQL server ready for `pytest -m postgres` and benchmarks/bench_backends.py.
# Installs Debian's postgresql when absent, starts it, creates the roles the tests use, and prints the
# URL to export as RECEIPTS_TEST_PG. Run as root (CI containers) or with sudo available.
set -euo pipefail

PG_USER="${RECEIPTS_PG_USER:-receipts}"
PG_PASSWORD="${RECEIPTS_PG_PASSWORD:-receipts}"
PG_READER="${RECEIPTS_PG_READER:-receipts_reader}"
PG_READER_PASSWORD="${RECEIPTS_PG_READER_PASSWORD:-receipts_reader}"
PG_WRITER="${RECEIPTS_PG_WRITER:-receipts_writer}"
PG_WRITER_PASSWORD="${RECEIPTS_PG_WRITER_PASSWORD:-receipts_writer}"
PG_DB="${RECEIPTS_PG_DB:-receipts_test}"
PG_HOST="${RECEIPTS_PG_HOST:-127.0.0.1}"
PG_PORT="${RECEIPTS_PG_PORT:-5432}"

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
as_postgres() { if [ "$(id -u)" = 0 ]; then su postgres -c "$*"; else sudo -u postgres bash -c "$*"; fi; }

if ! command -v pg_ctlcluster >/dev/null 2>&1; then
    echo "installing Debian's postgresql" >&2
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
fi

# `service` works in containers without systemd; pg_ctlcluster is the fallback on hosts without it.
if ! as_postgres "pg_isready -q -h $PG_HOST -p $PG_PORT"; then
    as_root service postgresql start >&2 || {
        version="$(ls /etc/postgresql | sort -V | tail -1)"
        as_root pg_ctlcluster "$version" main start >&2
    }
    for _ in $(seq 1 30); do
        as_postgres "pg_isready -q -h $PG_HOST -p $PG_PORT" && break
        sleep 1
    done
fi

# CREATEDB: the test session creates (and drops) a fresh database per run.
as_postgres "psql -v ON_ERROR_STOP=1 -q -d postgres" >&2 <<SQL
SELECT 'CREATE ROLE $PG_USER LOGIN CREATEDB PASSWORD ''$PG_PASSWORD'''
 WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '$PG_USER')\gexec
ALTER ROLE $PG_USER LOGIN CREATEDB PASSWORD '$PG_PASSWORD';
SELECT 'CREATE ROLE $PG_READER LOGIN PASSWORD ''$PG_READER_PASSWORD'''
 WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '$PG_READER')\gexec
ALTER ROLE $PG_READER LOGIN PASSWORD '$PG_READER_PASSWORD';
SELECT 'CREATE ROLE $PG_WRITER LOGIN PASSWORD ''$PG_WRITER_PASSWORD'''
 WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '$PG_WRITER')\gexec
ALTER ROLE $PG_WRITER LOGIN PASSWORD '$PG_WRITER_PASSWORD';
SELECT 'CREATE DATABASE $PG_DB OWNER $PG_USER'
 WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = '$PG_DB')\gexec
SQL

echo "postgresql://$PG_USER:$PG_PASSWORD@$PG_HOST:$PG_PORT/$PG_DB"
