"""The ``model-fetcher`` init container's script: the order's repository into the model volume.

A POSIX shell script with its inputs in the environment (``MODEL_REPOSITORY``, ``MODEL_REVISION``,
``MODEL_DIR``, ``MODEL_ROOT``, ``HF_TOKEN``), so no value from an order is ever parsed as shell
syntax. It runs the image's Hugging Face CLI (``hf download``, ``huggingface-cli download`` on older
images) and, with the Python that runs that CLI (named on its first line), a short program around
it, ``FETCH_PROGRAM``, for what the CLI alone does not do:

* **the hub's own words**: the revision is resolved (``model_info``: the commit's sha and files) and
  one file's ``HEAD`` asked before anything is written, so a refusal ends the container with one last
  line naming the repository, the revision and what the hub said, e.g. ``model-fetcher error:
  org/model@main: the hub answered 401 GatedRepo: Access to model org/model is restricted. You must
  have access to it and be authenticated to access it. Please log in.`` (``terminationMessagePolicy:
  FallbackToLogsOnError`` puts the log's tail in the container's terminated state, where the
  observer reads it as ``ModelDownloadFailed``). The CLI prints ``Access denied. Model 'org/model'
  requires approval`` for both a missing and a refused token, and never names the revision;
* **resume across attempts**: ``huggingface_hub`` (2.x) resumes a cut download only within one
  process and deletes its partial file when it gives up, so a restarted container would start a
  shard of gigabytes over. The program fetches the large (LFS) files itself with the library's own
  ``http_get`` and a ``Range`` from what an earlier attempt left in ``.cache/ai-inference-partial/<sha256>``
  (named by the file's content hash: bytes of another version are never appended to), moves a file
  into place only once all its bytes are there, and leaves the rest to ``hf download``, which checks
  every such file's sha256 before it takes it (a file without its metadata is hashed, and fetched
  again on a mismatch);
* **one commit**: ``hf download --revision <sha>`` of the commit resolved first, so a push to the
  branch during the download never mixes two versions;
* **room first**: the bytes still to come are compared with the volume's free space before any is
  written, so a volume too small (sized from a wrong ``parameterCount``) is named at once, not after
  gigabytes; a volume that fills anyway (``ENOSPC``) is named the same way;
* **progress**: every ``MODEL_FETCH_PROGRESS_SECONDS`` (10 by default) one line ``model-fetcher:
  progress: <arrived> of <total> bytes (<percent>)``, counted from the volume (whole files and the
  large files' partial bytes), so ``kubectl logs <pod> -c model-fetcher`` shows how far it is;
* **the namespace's model cache** (``MODEL_CACHE_DIR``, ``workload.modelCache``): once the hub has
  answered this order's token for the commit (the ``model_info`` and the ``HEAD`` above), a commit the
  cache holds whole (``<cache>/<repository>/<commit>`` with its mark) is copied from there, each large
  file's sha256 checked, instead of downloaded; a commit downloaded is copied aside into the cache and
  renamed into place in one step for the next replica. A cache that lacks a file, holds other bytes or
  is full only means a download;
* **nothing trusted that did not arrive**: ``hf download`` answers success with the folder as it is
  when it cannot reach the hub and the folder is not empty (a bad token, a missing repository, a hub
  that is down); the program checks that every file of the commit is in the folder with its size
  before the script writes its marker.

Without such a Python (an image whose CLI is not a Python script), the script runs the CLI alone
and at least refuses a folder it left with nothing in it.

Markers: ``.ai-inference-fetching`` (``<repository>@<revision>``) is written before a download
starts, so an interrupted fetch of another model is found and removed; ``.ai-inference-fetched``
after it ends, so a restart skips the network. Any earlier marker of the folder is removed first:
a folder left between two revisions is never taken for either.
"""

from __future__ import annotations

FETCH_MARKER = ".ai-inference-fetched"
# Written before a download starts: an interrupted fetch of another model is still found and removed.
FETCHING_MARKER = ".ai-inference-fetching"
# A commit in the namespace's model cache is whole once this mark is in its folder.
CACHE_MARK = ".ai-inference-complete"
# Where the large files' bytes gather, under the model's folder, until each is whole.
PARTIAL_DIR = ".cache/ai-inference-partial"
# The program's exit status when the CLI's Python has no huggingface_hub: the script runs the CLI alone.
NO_LIBRARY_EXIT = 3

# Run by the CLI's own interpreter (any Python 3.8+ with huggingface_hub 0.2x to 2.x).
FETCH_PROGRAM = (
    """\
import errno
import hashlib
import os
import shutil
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

try:
    from huggingface_hub import HfApi, constants, hf_hub_url
    from huggingface_hub.file_download import get_hf_file_metadata, http_get
    from huggingface_hub.utils import build_hf_headers
except ImportError:
    sys.exit(__NO_LIBRARY__)

REPO = os.environ["MODEL_REPOSITORY"]
WANT = REPO + "@" + (os.environ.get("MODEL_REVISION") or "main")
MODEL_DIR = Path(os.environ["MODEL_DIR"])
PARTIAL = MODEL_DIR / "__PARTIAL__"


def say(text):
    print("model-fetcher: " + text, file=sys.stderr, flush=True)


def fail(text):
    print("model-fetcher error: " + WANT + ": " + text, file=sys.stderr, flush=True)
    os._exit(1)


def gib(count):
    return "%.2f GiB" % (count / 2.0 ** 30) if count >= 2 ** 30 else "%.1f MiB" % (count / 2.0 ** 20)


# A model volume is sized from the model's size (the planner's estimate: weights x 1.1 + 2 GiB).
TOO_SMALL = ("the model volume is sized from the model's size: give the order the model's true size "
             "(spec.model.parameterCount), or an administrator sets the recipe's modelVolumeGiB")


def full():
    try:
        so_far = " with %s of %s arrived" % (gib(arrived()), gib(TOTAL))
    except NameError:  # before the commit's files were known
        so_far = ""
    fail("the model volume is full (%s free)%s: %s" % (gib(shutil.disk_usage(str(MODEL_DIR)).free), so_far, TOO_SMALL))


def refused(error):
    # The library's whole account for the log, then one line with the hub's own words for the order.
    print(type(error).__name__ + ": " + str(error), file=sys.stderr)
    if getattr(error, "errno", None) == errno.ENOSPC:
        full()
    response = getattr(error, "response", None)
    words = "%s: %s" % (type(error).__name__, " ".join(str(error).split()))
    if response is None and isinstance(error, OSError):  # the volume (full, say), or bytes that do not add up
        fail(words)
    if response is None:
        fail("the hub at %s cannot be reached (%s); what arrived is kept for the next attempt"
             % (constants.ENDPOINT, words))
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    said = response.headers.get("X-Error-Message") or (lines[0] if lines else "")
    code = response.headers.get("X-Error-Code")
    fail("the hub answered %s%s: %s" % (response.status_code, " " + code if code else "", said))


try:
    info = HfApi().model_info(REPO, revision=os.environ.get("MODEL_REVISION") or None, files_metadata=True)
except Exception as error:
    refused(error)
COMMIT = info.sha
FILES = {}
for sibling in info.siblings or []:
    lfs = sibling.lfs
    FILES[sibling.rfilename] = (lfs.size if lfs else sibling.size, getattr(lfs, "sha256", None) if lfs else None)
TOTAL = sum(size or 0 for size, _ in FILES.values())
say("%s is commit %s: %d files, %d bytes" % (WANT, COMMIT, len(FILES), TOTAL))


def arrived():
    # The commit's bytes in the volume: whole files, and what a large file has so far.
    count = 0
    for name, (size, sha) in FILES.items():
        path = MODEL_DIR / name
        part = PARTIAL / sha if sha else None
        if path.is_file():
            count += min(path.stat().st_size, size or 0)
        elif part is not None and part.is_file():
            count += min(part.stat().st_size, size or 0)
    return count


FREE = shutil.disk_usage(str(MODEL_DIR)).free
STILL = TOTAL - arrived()
if STILL > FREE:
    fail("the model volume has %s free and commit %s needs %s more (%s in all): %s"
         % (gib(FREE), COMMIT, gib(STILL), gib(TOTAL), TOO_SMALL))


def progress(every):
    while True:
        count = arrived()
        say("progress: %d of %d bytes (%.1f%%)" % (count, TOTAL, 100.0 * count / TOTAL if TOTAL else 100.0))
        if FINISHED.wait(every):
            return


FINISHED = threading.Event()
threading.Thread(target=progress, args=(float(os.environ.get("MODEL_FETCH_PROGRESS_SECONDS") or 10),),
                 daemon=True).start()


def head(name):
    try:
        return get_hf_file_metadata(hf_hub_url(REPO, name, revision=COMMIT))
    except Exception as error:
        refused(error)


# What a gated repository answers this token: one file's HEAD (not of the card or .gitattributes, which a
# gated repository may show anyone), before anything is written.
PROBE = [name for name in sorted(FILES) if name not in ("README.md", ".gitattributes")] or sorted(FILES)
if PROBE:
    head("config.json" if "config.json" in FILES else PROBE[0])

LARGE = {name: entry for name, entry in FILES.items() if entry[1]}
PARTIAL.mkdir(parents=True, exist_ok=True)
for leftover in PARTIAL.iterdir():
    if leftover.name not in {sha for _, sha in LARGE.values()}:
        leftover.unlink()


def fetch(name):
    size, sha = LARGE[name]
    dest = MODEL_DIR / name
    if dest.is_file() and dest.stat().st_size == size:
        return
    meta = head(name)
    part = PARTIAL / sha
    have = part.stat().st_size if part.exists() else 0
    if have > size:
        part.unlink()
        have = 0
    say("%s: %d bytes%s" % (name, size, ", resumed after the %d an earlier attempt left" % have if have else ""))
    own = urlsplit(meta.location).netloc == urlsplit(constants.ENDPOINT).netloc
    try:
        with part.open("ab") as out:
            http_get(meta.location, out, resume_size=have, headers=build_hf_headers() if own else {},
                     expected_size=size, displayed_filename=name)
    except Exception as error:
        refused(error)
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.replace(str(part), str(dest))


# The namespace's model cache (workload.modelCache): <cache>/<repository>/<commit>, whole once its mark is
# there. Reached only now, after the hub said with this order's own token that it may read the commit.
CACHE = Path(os.environ["MODEL_CACHE_DIR"]) / REPO / COMMIT if os.environ.get("MODEL_CACHE_DIR") else None
CACHE_MARK = "__CACHE_MARK__"


def sha256_of(path):
    digest = hashlib.sha256()
    with path.open("rb") as data:
        for block in iter(lambda: data.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def from_cache():
    # Every file of the commit copied from the cache into the volume (a large file's sha256 checked),
    # or False: then it is downloaded as if there were no cache.
    if CACHE is None or not (CACHE / CACHE_MARK).is_file():
        return False
    for name, (size, _) in FILES.items():
        held = CACHE / name
        if not held.is_file() or (size is not None and held.stat().st_size != size):
            say("the model cache's copy of commit %s lacks %s: downloading it instead" % (COMMIT, name))
            return False
    say("%s (commit %s) is in the namespace's model cache: copied from %s, not downloaded" % (WANT, COMMIT, CACHE))
    for name, (size, sha) in sorted(FILES.items()):
        dest = MODEL_DIR / name
        if dest.is_file() and dest.stat().st_size == size:
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        copy = dest.with_name(dest.name + ".ai-inference-copy")
        try:
            shutil.copyfile(str(CACHE / name), str(copy))
        except OSError as error:
            refused(error)
        if sha and sha256_of(copy) != sha:
            copy.unlink()
            say("the model cache's %s is not the commit's (sha256): downloading instead" % name)
            shutil.rmtree(str(CACHE), ignore_errors=True)  # this download takes its place
            return False
        os.replace(str(copy), str(dest))
    return True


def publish():
    # The volume's copy into the cache, for the next replica: written aside, then renamed into place in
    # one step, so no reader ever sees part of it; a replica that published first wins.
    if CACHE is None or (CACHE / CACHE_MARK).is_file():
        return
    aside = CACHE.parent / (".incoming-%s-%d" % (COMMIT, os.getpid()))
    try:
        shutil.rmtree(str(aside), ignore_errors=True)
        if CACHE.exists():  # a folder without the mark is no copy of ours: this one takes its place
            shutil.rmtree(str(CACHE), ignore_errors=True)
        for name in sorted(FILES):
            (aside / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(str(MODEL_DIR / name), str(aside / name))
        (aside / CACHE_MARK).write_text(WANT)
        os.rename(str(aside), str(CACHE))
        say("%s (commit %s) kept in the namespace's model cache for the next replica" % (WANT, COMMIT))
    except OSError as error:
        shutil.rmtree(str(aside), ignore_errors=True)
        say("not kept in the model cache (%s): the next replica downloads it" % error)


CACHED = from_cache()
if not CACHED:
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(fetch, sorted(LARGE)))

    cli = [sys.argv[1], "download", REPO, "--revision", COMMIT, "--local-dir", str(MODEL_DIR)]
    done = subprocess.run(cli, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    sys.stderr.write(done.stdout)
    if done.returncode != 0:
        if "No space left on device" in done.stdout:
            full()
        said = [line.strip() for line in done.stdout.splitlines() if line.strip()]
        last = [line for line in said if line.startswith("Error:")] or said or [""]
        fail("%s download failed (exit %d): %s" % (sys.argv[1], done.returncode, last[-1]))
short = []
for name, (size, _) in sorted(FILES.items()):
    path = MODEL_DIR / name
    if not path.is_file() or (size is not None and path.stat().st_size != size):
        short.append(name)
if short:
    fail("%d of %d files of commit %s did not arrive (%s)" % (len(short), len(FILES), COMMIT, ", ".join(short[:3])))
if not CACHED:
    publish()
FINISHED.set()
shutil.rmtree(str(PARTIAL), ignore_errors=True)
say("progress: %d of %d bytes (100.0%%)" % (TOTAL, TOTAL))
say("%s (commit %s): %d files, %d bytes in %s" % (WANT, COMMIT, len(FILES), TOTAL, MODEL_DIR))
""".replace("__NO_LIBRARY__", str(NO_LIBRARY_EXIT))
    .replace("__PARTIAL__", PARTIAL_DIR)
    .replace("__CACHE_MARK__", CACHE_MARK)
)

# The shell around it: markers, the volume's earlier model, the CLI and its interpreter.
_SCRIPT = """\
set -eu
want="${MODEL_REPOSITORY}@${MODEL_REVISION:-main}"
marker="${MODEL_DIR}/__MARKER__"
if [ -f "$marker" ] && [ "$(cat "$marker")" = "$want" ]; then
  echo "model ${want} already present in ${MODEL_DIR}"
  exit 0
fi
# The volume is sized for one model: what an earlier spec fetched (a folder with either mark) goes
# before this one comes.
find "$MODEL_ROOT" \\( -name "__MARKER__" -o -name "__FETCHING__" \\) -type f 2>/dev/null | while read -r mark; do
  held="$(dirname "$mark")"
  if [ "$held" != "$MODEL_DIR" ] && [ -d "$held" ]; then
    echo "removing ${held}: the order now serves ${want}"
    rm -rf "$held"
  fi
done
mkdir -p "$MODEL_DIR"
rm -f "$marker"
printf '%s' "$want" > "${MODEL_DIR}/__FETCHING__"
if command -v hf >/dev/null 2>&1; then hf=hf; else hf=huggingface-cli; fi
# The Python that runs the CLI (its first line) runs the program around it.
py=""
cli="$(command -v "$hf" || true)"
if [ -n "$cli" ] && IFS= read -r first < "$cli"; then
  case "$first" in "#!"*python*) py="${first#??}" ;; esac
fi
if [ -n "$py" ]; then
  rc=0
  $py - "$hf" <<'PROGRAM' || rc=$?
__PROGRAM__PROGRAM
  if [ "$rc" = __NO_LIBRARY__ ]; then py=""; elif [ "$rc" != 0 ]; then exit "$rc"; fi
fi
if [ -z "$py" ]; then
  set -- "$hf" download "$MODEL_REPOSITORY" --local-dir "$MODEL_DIR"
  if [ -n "${MODEL_REVISION:-}" ]; then
    set -- "$@" --revision "$MODEL_REVISION"
  fi
  "$@"
  # The CLI answers success with the folder as it was when the hub refuses it: nothing in it is no model.
  if [ -z "$(ls -A "$MODEL_DIR" | grep -v -e '^\\.cache$' -e '^\\.ai-inference-')" ]; then
    echo "model-fetcher error: ${want}: ${hf} download left no file in ${MODEL_DIR}" >&2
    exit 1
  fi
fi
printf '%s' "$want" > "$marker"
rm -f "${MODEL_DIR}/__FETCHING__"
echo "model ${want} fetched into ${MODEL_DIR}"
"""
FETCH_SCRIPT = (
    _SCRIPT.replace("__MARKER__", FETCH_MARKER)
    .replace("__FETCHING__", FETCHING_MARKER)
    .replace("__NO_LIBRARY__", str(NO_LIBRARY_EXIT))
    .replace("__PROGRAM__", FETCH_PROGRAM)
)
