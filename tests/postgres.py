"""Throwaway PostgreSQL clusters for tests: ``initdb`` in a temporary directory, ``pg_ctl``.

A cluster listens on 127.0.0.1 and on a Unix socket in its directory, trusts local
connections, and is stopped (``-m immediate``) and removed afterwards. As root, the server runs
as the ``postgres`` system user (PostgreSQL refuses to run as root). Binaries are looked for on
``PATH``, then under ``/usr/lib/postgresql/*/bin`` (Debian's layout); ``make test`` installs
them when they are missing.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest


def binaries() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl``, or None."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(os.path.realpath(found)).parent
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if (Path(candidate) / "initdb").exists() and (Path(candidate) / "pg_ctl").exists():
            return Path(candidate)
    return None


def _as_server_user() -> list[str]:
    if os.geteuid() != 0:
        return []
    runuser = shutil.which("runuser")
    if runuser is None:
        pytest.fail("running as root without runuser: cannot start PostgreSQL as another user")
    return [runuser, "-u", "postgres", "--"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Cluster:
    """A running cluster: ``url`` over TCP, ``socket_url`` over its Unix socket."""

    base: Path
    port: int
    bin: Path
    prefix: list[str]

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def socket_url(self) -> str:
        return f"postgresql://postgres@/postgres?host={self.base}&port={self.port}"

    def _ctl(self, *args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([*self.prefix, str(self.bin / "pg_ctl"), "-D",
                               str(self.base / "data"), *args], capture_output=True,
                              timeout=120, check=False)

    def start(self) -> None:
        options = f"-k {self.base} -p {self.port} -c listen_addresses=127.0.0.1 -F"
        done = self._ctl("-o", options, "-l", str(self.base / "log"), "-w", "start")
        if done.returncode != 0:
            raise RuntimeError(f"pg_ctl start failed: {done.stderr.decode(errors='replace')}"
                               f"\n{(self.base / 'log').read_text(errors='replace')}")

    def stop(self, mode: str = "immediate") -> None:
        self._ctl("-m", mode, "-w", "stop")

    def new_database(self, prefix: str) -> str:
        """A fresh database named ``prefix`` and a random suffix; its URL over TCP."""
        import psycopg

        name = f"{prefix}_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url.rsplit("/", 1)[0] + f"/{name}"

    def restart(self) -> None:
        """Stop at once (as a crash would) and start again."""
        self.stop()
        self.start()


@contextmanager
def cluster() -> Iterator[Cluster]:
    """A fresh running cluster, removed afterwards. Fails (does not skip) when PostgreSQL or
    psycopg is missing: the stores are part of what the suite proves."""
    where = binaries()
    if where is None:
        pytest.fail("PostgreSQL binaries (initdb, pg_ctl) not found; `make test` installs them")
    prefix = _as_server_user()
    base = Path(tempfile.mkdtemp(prefix="callgate-pg-"))
    if prefix:
        shutil.chown(base, "postgres")
    made = Cluster(base, _free_port(), where, prefix)
    try:
        subprocess.run([*prefix, str(where / "initdb"), "-D", str(base / "data"), "-A", "trust",
                        "-U", "postgres", "--no-sync"], check=True, capture_output=True,
                       timeout=120)
        made.start()
        yield made
    finally:
        made.stop()
        shutil.rmtree(base, ignore_errors=True)
