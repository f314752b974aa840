"""Every shell block of the docs runs as written, on the stack the docs set up.

The reader's path, literally: ``bash deploy/dev/up.sh`` (local-run.md's first block) in a fresh
``$HOME`` — so the docs' ``~/.local/state/ai-inference/dev`` paths are this stack's — with only the
build cache shared (``$AI_INFERENCE_CACHE``, as the docs say); then every ```bash block of every page,
page by page, each in bash with ``set -eo pipefail`` after the documented setup
(``eval "$(.venv/bin/ai-inference dev env)"``), the variables a block sets kept for the page's next
blocks (``URL``, ``TOKEN``), from the repository root; a block fails the test on a non-zero exit.

A block the local stack cannot run says so in the page, on the line before its fence:
``<!-- docs-test: skip: why -->`` (a Deckhouse cluster, a registry, a template to fill in, a command
that runs the test suite itself); ``<!-- docs-test: setup -->`` is the block the stack is started
with, ``<!-- docs-test: last -->`` one that runs after every other (``dev down``). A watch
(``kubectl get … -w``) runs until the reader interrupts it: here, until 10 s have passed.
The test prints how many blocks ran and which were skipped, and why.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from devstack.cluster.paths import cache_root

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.temporal,
    pytest.mark.binaries,
    pytest.mark.engine,
    pytest.mark.timeout(1800),
]

REPO_ROOT = Path(__file__).resolve().parents[2]
# Every page with a ```bash block is here (checked below).
PAGES = (
    "README.md",
    "docs/local-run.md",
    "docs/cli.md",
    "docs/examples.md",
    "docs/faq.md",
    "docs/catalog.md",
    "docs/operations.md",
    "docs/admin-guide.md",
    "docs/production-temporal.md",
    "docs/user-guide.md",
)
# The blocks that come last, in this order: the user guide's deletion of its order, then the README's
# block and local-run.md's, which stop the stack (`dev down`).
LAST_ORDER = ("docs/user-guide.md", "README.md", "docs/local-run.md")
MARK = re.compile(r"<!-- docs-test: (skip: (?P<why>[^>]*?)|setup|last) -->\s*$")
WATCH_SECONDS = 10
BLOCK_SECONDS = 300


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    body: str
    mark: str  # "run", "setup", "last" or "skip"
    why: str = ""

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def blocks_of(page: str) -> list[Block]:
    lines = (REPO_ROOT / page).read_text().splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```bash":
            start = i
            i += 1
            body: list[str] = []
            while i < len(lines) and lines[i].strip() != "```":
                body.append(lines[i])
                i += 1
            mark, why = "run", ""
            found = MARK.search(lines[start - 1]) if start else None
            if found:
                mark = "skip" if found.group("why") is not None else found.group(1)
                why = (found.group("why") or "").strip()
            out.append(Block(page, start + 1, "\n".join(body) + "\n", mark, why))
        i += 1
    return out


def interruptible(body: str) -> str:
    """A watch (`… -w` / `--watch`) is stopped as a reader's Ctrl-C would: after WATCH_SECONDS."""
    out = []
    for line in body.splitlines():
        if re.search(r"^\s*kubectl .*(?:\s-w|\s--watch)\s*(?:#.*)?$", line):
            line = f"timeout {WATCH_SECONDS} {line.strip()} || [ $? -eq 124 ]"
        out.append(line)
    return "\n".join(out) + "\n"


@dataclass
class Reader:
    """The reader's shell: a fresh HOME, the repository as the working directory."""

    home: Path

    def base_env(self) -> dict[str, str]:
        keep = ("LANG", "LC_ALL", "TERM", "TMPDIR", "GOPROXY", "GOFLAGS", "GOTOOLCHAIN", "PIP_INDEX_URL")
        env = {k: os.environ[k] for k in keep if k in os.environ}
        go = "/usr/local/go/bin:" if Path("/usr/local/go/bin").is_dir() else ""
        env.update(
            HOME=str(self.home),
            PATH=f"{go}/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            AI_INFERENCE_CACHE=str(cache_root()),
            GOCACHE=os.environ.get("GOCACHE", str(Path.home() / ".cache" / "go-build")),
            GOMODCACHE=os.environ.get("GOMODCACHE", str(Path.home() / "go" / "pkg" / "mod")),
        )
        return env

    def run(self, body: str, state: Path, timeout: float = BLOCK_SECONDS) -> subprocess.CompletedProcess[str]:
        """One block: the page's variables so far, then the block with -e and pipefail; what it
        leaves set is kept in ``state`` for the next block (set -a exports every assignment)."""
        script = (
            f"set -a\n[ -f {shlex.quote(str(state))} ] && . {shlex.quote(str(state))}\n"
            f"set -eo pipefail\n{interruptible(body)}\nset +e\n"
            f"export -p | grep -v -E '^declare -x (BASHOPTS|SHELLOPTS|BASH_VERSINFO|EUID|PPID|UID|SHLVL|_)=' "
            f"> {shlex.quote(str(state))}.next && mv {shlex.quote(str(state))}.next {shlex.quote(str(state))}\n"
        )
        return subprocess.run(
            ["bash", "-c", script],
            cwd=REPO_ROOT,
            env=self.base_env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )


def all_blocks() -> list[Block]:
    return [b for page in PAGES for b in blocks_of(page)]


def _report(block: Block, result: subprocess.CompletedProcess[str]) -> str:
    return (
        f"{block.where} exited {result.returncode}:\n{block.body}\n--- stdout\n{result.stdout[-3000:]}"
        f"\n--- stderr\n{result.stderr[-3000:]}"
    )


# ----------------------------------------------------------------------------- unit checks


def test_every_page_with_shell_blocks_is_run() -> None:
    pages = {p.relative_to(REPO_ROOT).as_posix() for p in [REPO_ROOT / "README.md", *(REPO_ROOT / "docs").glob("*.md")]}
    with_blocks = {p for p in pages if "```bash" in (REPO_ROOT / p).read_text()}
    assert with_blocks == set(PAGES)


def test_every_skipped_block_says_why_and_one_starts_the_stack() -> None:
    blocks = all_blocks()
    assert [b.where for b in blocks if b.mark == "skip" and len(b.why) < 10] == []
    (setup,) = [b for b in blocks if b.mark == "setup"]
    assert setup.body.strip() == "bash deploy/dev/up.sh"
    # Most of what the docs show runs; what does not is the exception.
    assert sum(b.mark in ("run", "last") for b in blocks) > sum(b.mark == "skip" for b in blocks)


def test_a_watch_is_interrupted_and_nothing_else_is() -> None:
    body = "kubectl get inferenceservice support-llm -n support -w\nkubectl get hpa x -w   # note\ncurl -w x\n"
    lines = interruptible(body).splitlines()
    assert lines[0].startswith(f"timeout {WATCH_SECONDS} kubectl")
    assert lines[0].endswith("|| [ $? -eq 124 ]")
    assert lines[1].startswith("timeout ")
    assert lines[2] == "curl -w x"


# ------------------------------------------------------------------------ the docs, run


@pytest.fixture(scope="module")
def reader(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reader]:
    reader = Reader(tmp_path_factory.mktemp("home"))
    (setup,) = [b for b in all_blocks() if b.mark == "setup"]
    started = reader.run(setup.body, reader.home / ".setup-state", timeout=1500)
    try:
        assert started.returncode == 0, _report(setup, started)
        yield reader
    finally:
        stopped = subprocess.run(
            [str(REPO_ROOT / ".venv" / "bin" / "ai-inference"), "dev", "down", "--purge"],
            cwd=REPO_ROOT,
            env=reader.base_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
        print(stopped.stdout[-2000:], stopped.stderr[-2000:])


SETUP = 'eval "$(.venv/bin/ai-inference dev env)"\n'


@pytest.mark.parametrize("page", PAGES)
def test_the_pages_blocks_run_as_written(reader: Reader, page: str) -> None:
    state = reader.home / f".state-{page.replace('/', '-')}"
    prepared = reader.run(SETUP, state)
    assert prepared.returncode == 0, prepared.stderr
    ran, skipped = 0, []
    for block in blocks_of(page):
        if block.mark == "skip":
            skipped.append(f"{block.where}: {block.why}")
            continue
        if block.mark != "run":
            continue
        result = reader.run(block.body, state)
        assert result.returncode == 0, _report(block, result)
        ran += 1
    print(f"\n{page}: {ran} blocks run, {len(skipped)} skipped")
    for line in skipped:
        print(f"  skipped {line}")


def test_the_catalog_the_docs_name_is_in_the_cluster_and_answers(reader: Reader) -> None:
    """`kubectl get clustermodels` lists what the stand-in catalog serves (deploy/dev/catalog-models.yaml),
    and `ai-inference plan --source ai-models` reaches that catalog with dev env alone, quietly."""
    state = reader.home / ".state-catalog"
    assert reader.run(SETUP, state).returncode == 0
    listed = reader.run("kubectl get clustermodels -o name\n", state)
    assert listed.returncode == 0, listed.stderr
    served = yaml.safe_load((REPO_ROOT / "deploy" / "dev" / "catalog-models.yaml").read_text())["models"]
    expected = {f"clustermodel.ai-models.deckhouse.io/{m['name']}" for m in served if m["kind"] == "ClusterModel"}
    assert set(listed.stdout.split()) == expected
    planned = reader.run(
        "ai-inference plan --class default-llm --source ai-models --model multilingual-e5-large -o json\n", state
    )
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert json.loads(planned.stdout)["plan"]["deviceClass"]
    # A person's command: its answer on stdout, no log lines of the libraries on stderr.
    assert planned.stderr == ""


def test_the_blocks_that_come_last_run_as_written(reader: Reader) -> None:
    last = sorted((b for b in all_blocks() if b.mark == "last"), key=lambda b: LAST_ORDER.index(b.page))
    assert last
    state = reader.home / ".state-last"
    assert reader.run(SETUP, state).returncode == 0
    for block in last:
        result = reader.run(block.body, state)
        assert result.returncode == 0, _report(block, result)
    counted = all_blocks()
    print(
        f"\ndocs: {sum(b.mark in ('run', 'last', 'setup') for b in counted)} blocks run, "
        f"{sum(b.mark == 'skip' for b in counted)} skipped"
    )
