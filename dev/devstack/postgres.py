"""A PostgreSQL server of the local stack's own: ``initdb`` into a data directory, its own port on
loopback, no system service — the database of the production Temporal (``devstack.temporal_server``).

PostgreSQL comes from the system's package manager (Debian: ``apt-get install postgresql``; its
binaries live in ``/usr/lib/postgresql/<major>/bin``, off PATH). Nothing here touches the package's
own cluster or service: the server runs in the foreground of the process that starts it, on a
data directory of its own, listening on ``127.0.0.1:<port>`` only (no Unix socket), with password
(SCRAM) authentication for the one role it is made with.

PostgreSQL refuses to run as root. As root, the server and ``initdb`` run as the ``postgres`` system
user the package creates (``setpriv``; ``nobody`` where there is none), and the data directory,
owned by that user, must be reachable by it: a directory under ``/tmp`` or ``/var/tmp`` is, one under
``/root`` is not (:func:`data_dir_for` picks one).

Durability is a choice: ``durable=False`` (tests) turns off fsync, synchronous commit and full-page
writes, as the control plane's etcd runs ``--unsafe-no-fsync``; the default keeps them on, which
is what any sizing figure measured on it assumes.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from devstack.process_group import stop_group

INSTALL_HINT = "Debian/Ubuntu: apt-get install postgresql (any PostgreSQL >= 12)"
# The role Temporal connects as (the cluster's superuser: it creates its own databases).
ROLE = "temporal"
Progress = Callable[[str], None]


class PostgresError(RuntimeError):
    """PostgreSQL is missing or did not start; the message says what to do."""


def postgres_bin_dir() -> Path:
    """The directory of ``initdb`` and ``postgres``: the newest ``/usr/lib/postgresql/<N>/bin``
    (Debian keeps them off PATH), else wherever PATH has ``initdb``."""
    candidates = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    if candidates:
        return candidates[-1].parent
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    raise PostgresError(f"PostgreSQL is missing: the production Temporal keeps its data in it. {INSTALL_HINT}")


def _run_user() -> pwd.struct_passwd | None:
    """The user PostgreSQL runs as when this process is root (None: run as ourselves)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise PostgresError("running as root, and there is no postgres or nobody user to run PostgreSQL as")


def data_dir_for(base: Path) -> Path:
    """Where to keep the data directory of a server that belongs with ``base`` (a state directory):
    ``base/postgres``, unless this process is root and the PostgreSQL user cannot reach ``base`` —
    then ``/var/tmp/ai-inference-postgres/<digest of base>`` (kept across restarts, like ``base``)."""
    user = _run_user()
    wanted = base / "postgres"
    if user is None or _reachable(base, user):
        return wanted
    digest = hashlib.sha256(str(base.resolve()).encode()).hexdigest()[:16]
    return Path("/var/tmp/ai-inference-postgres") / digest


def _reachable(path: Path, user: pwd.struct_passwd) -> bool:
    """Every existing ancestor of ``path`` lets ``user`` through (others' x bit, or theirs)."""
    for parent in [path.resolve(), *path.resolve().parents]:
        if not parent.exists():
            continue
        st = parent.stat()
        if st.st_uid == user.pw_uid:
            continue
        if not st.st_mode & 0o001:
            return False
    return True


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class PostgresServer:
    """One PostgreSQL server on ``127.0.0.1:port`` with its data in ``data_dir``.

    ``ensure_initialized()`` runs ``initdb`` once (a password of its own, kept owner-only in the data
    directory's parent); ``argv()`` is the foreground server (for a process manager such as
    ``ai-inference dev up``); ``start()``/``stop()`` run it as a child of this process."""

    data_dir: Path
    port: int = 0
    durable: bool = True
    process: subprocess.Popen[bytes] | None = None

    def __post_init__(self) -> None:
        if not self.port:
            self.port = _free_port()

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def password_file(self) -> Path:
        return self.data_dir.with_name(self.data_dir.name + ".password")

    @property
    def log_file(self) -> Path:
        return self.data_dir.with_name(self.data_dir.name + ".log")

    @property
    def password(self) -> str:
        return self.password_file.read_text().strip()

    def _as_user(self, argv: list[str], die_with_parent: bool = False) -> list[str]:
        user = _run_user()
        if user is None:
            return argv
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            raise PostgresError("running as root, PostgreSQL must run as another user: setpriv (util-linux) is missing")
        # A change of user clears the parent-death signal set before exec: setpriv sets it again.
        dies = ["--pdeathsig=INT"] if die_with_parent else []
        return [setpriv, f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups", *dies, "--", *argv]

    def ensure_initialized(self, say: Progress | None = None) -> bool:
        """``initdb`` unless the data directory holds a cluster already; True when it ran."""
        if (self.data_dir / "PG_VERSION").is_file():
            return False
        bin_dir = postgres_bin_dir()
        user = _run_user()
        if self.data_dir.exists():
            shutil.rmtree(self.data_dir)  # an initdb that did not finish
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        self.data_dir.mkdir(mode=0o700)
        self.password_file.touch(mode=0o600)
        self.password_file.write_text(secrets.token_urlsafe(24))
        pwfile = self.data_dir.parent / f".{self.data_dir.name}.pw-{os.getpid()}"
        pwfile.touch(mode=0o600)
        pwfile.write_text(self.password)
        if user is not None:
            os.chown(self.data_dir, user.pw_uid, user.pw_gid)
            os.chown(pwfile, user.pw_uid, user.pw_gid)
        if say:
            say(f"  PostgreSQL ({bin_dir}): initdb {self.data_dir}")
        try:
            argv = [str(bin_dir / "initdb"), "-D", str(self.data_dir), "-U", ROLE, f"--pwfile={pwfile}",
                    "--auth-host=scram-sha-256", "--auth-local=scram-sha-256", "--encoding=UTF8",
                    "--locale=C", "--no-instructions"]  # fmt: skip
            result = subprocess.run(self._as_user(argv), capture_output=True, text=True, cwd="/")
        finally:
            pwfile.unlink(missing_ok=True)
        if result.returncode != 0:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            raise PostgresError(f"initdb {self.data_dir} failed: {(result.stderr or result.stdout).strip()[-2000:]}")
        return True

    def settings(self) -> dict[str, str]:
        """Server settings given on its command line (loopback only, no Unix socket)."""
        values = {
            "listen_addresses": self.host,
            "unix_socket_directories": "",
            # Temporal's pools: the default store's and the visibility store's maxConns of each of
            # the four services, and the SQL tool. 100 is PostgreSQL's default too.
            "max_connections": "200",
            "shared_buffers": "128MB",
            "log_min_messages": "warning",
            "log_connections": "off",
        }
        if not self.durable:
            values |= {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}
        return values

    def argv(self, die_with_parent: bool = False) -> list[str]:
        """The server in the foreground (stops on SIGINT: PostgreSQL's fast shutdown);
        ``die_with_parent``: also when the process that started it dies."""
        argv = [str(postgres_bin_dir() / "postgres"), "-D", str(self.data_dir), "-p", str(self.port)]
        for key, value in self.settings().items():
            argv += ["-c", f"{key}={value}"]
        return self._as_user(argv, die_with_parent)

    def start(self, say: Progress | None = None, timeout: float = 60) -> PostgresServer:
        self.ensure_initialized(say)
        log = self.log_file.open("ab")
        self.process = subprocess.Popen(
            self.argv(die_with_parent=True), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd="/",
            start_new_session=True, preexec_fn=_die_with_parent,
        )  # fmt: skip
        log.close()
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 60) -> None:
        """Until ``pg_isready`` says the server accepts connections."""
        deadline = time.monotonic() + timeout
        isready = str(postgres_bin_dir() / "pg_isready")
        while True:
            if self.process is not None and self.process.poll() is not None:
                raise PostgresError(f"PostgreSQL exited with {self.process.returncode}: {self.log_tail()}")
            result = subprocess.run(
                [isready, "-h", self.host, "-p", str(self.port), "-U", ROLE, "-d", "postgres", "-t", "2"],
                capture_output=True,
                text=True,
            )
            if result.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise PostgresError(
                    f"PostgreSQL does not accept connections on {self.host}:{self.port} after {timeout:.0f}s: "
                    f"{result.stdout.strip()} {self.log_tail()}"
                )
            time.sleep(0.2)

    def stop(self, timeout: float = 30) -> None:
        stop_group(self.process, signal.SIGINT, timeout)  # PostgreSQL's fast shutdown: ends sessions, checkpoints

    def log_tail(self) -> str:
        text = self.log_file.read_text(errors="replace") if self.log_file.is_file() else ""
        return re.sub(r"\s+\n", "\n", text[-2000:])

    def remove(self) -> None:
        """Delete the data directory and its password (the server must be stopped)."""
        shutil.rmtree(self.data_dir, ignore_errors=True)
        self.password_file.unlink(missing_ok=True)
        self.log_file.unlink(missing_ok=True)


def _die_with_parent() -> None:
    """In the child before exec: SIGINT (PostgreSQL's fast shutdown) when its parent dies."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGINT)
