#!/usr/bin/env bash
# Checks, in about a second and before anything is built, every system prerequisite of the local
# stack (--for up: deploy/dev/up.sh) or of the tests (--for test: deploy/dev/test.sh), and stops at
# once naming each missing one with the command that installs it (README, "Two commands").
#
# Where it looks, overridable (the tests point these at folders of their own):
#   PYTHON                        the interpreter bootstrap.sh makes .venv with (python3)
#   AI_INFERENCE_SBIN_DIRS        where nginx is looked for beside PATH (/usr/sbin:/usr/local/sbin)
#   AI_INFERENCE_POSTGRES_ROOT    where PostgreSQL's server binaries live (/usr/lib/postgresql)
#   AI_INFERENCE_GO_FALLBACK_DIR  where a Go installed off PATH is found, to say so (/usr/local/go/bin)
#   AI_INFERENCE_CHROMIUM         the browser of the browser tests (chromium, chromium-browser or google-chrome on PATH)
set -uo pipefail

usage() { echo "usage: $0 --for up|test" >&2; exit 2; }
target=""
while [ $# -gt 0 ]; do
  case "$1" in
    --for) [ $# -ge 2 ] || usage; target=$2; shift 2 ;;
    --for=*) target=${1#--for=}; shift ;;
    *) usage ;;
  esac
done
case "$target" in up|test) ;; *) usage ;; esac

root=$(cd "$(dirname "$0")/../.." && pwd)
PYTHON=${PYTHON:-python3}
SBIN_DIRS=${AI_INFERENCE_SBIN_DIRS-/usr/sbin:/usr/local/sbin}
POSTGRES_ROOT=${AI_INFERENCE_POSTGRES_ROOT:-/usr/lib/postgresql}
GO_FALLBACK_DIR=${AI_INFERENCE_GO_FALLBACK_DIR:-/usr/local/go/bin}

missing=()   # one line each: what, why, how to install
found=()     # what was found, for the one line printed when nothing is missing
lack() { missing+=("$1"); }

# -- Python >= 3.11 with venv and ensurepip (Debian splits them into python3-venv)
python_version=$("$PYTHON" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null)
if ! command -v "$PYTHON" >/dev/null 2>&1; then
  lack "Python >= 3.11 ($PYTHON not found; bootstrap.sh makes .venv with it): apt-get install python3 python3-venv"
elif [ -z "$python_version" ]; then
  lack "Python >= 3.11 ($PYTHON does not run; bootstrap.sh makes .venv with it): apt-get install python3 python3-venv"
elif ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  lack "Python >= 3.11 ($PYTHON is $python_version; or set PYTHON= to a newer one): apt-get install python3 python3-venv (Debian 12 or later)"
elif ! "$PYTHON" -c 'import venv, ensurepip' 2>/dev/null; then
  lack "Python's venv module with ensurepip ($PYTHON $python_version has none; bootstrap.sh makes .venv with it): apt-get install python3-venv"
else
  found+=("Python $python_version")
fi

# -- Go: new enough for every go.mod of the control plane, or able to fetch that toolchain itself
go_needed=$(sed -n 's/^go \([0-9][0-9.]*\).*/\1/p' "$root"/deploy/controlplane/*/go.mod 2>/dev/null | sort -V | tail -n 1)
go_hint="apt-get install golang-go (Go >= 1.21 fetches the go.mod's toolchain itself), or Go ${go_needed:-1.26} from go.dev/doc/install"
if ! command -v go >/dev/null 2>&1; then
  if [ -x "$GO_FALLBACK_DIR/go" ]; then
    lack "Go on PATH (the control plane is built from Go modules; one is in $GO_FALLBACK_DIR): export PATH=\"\$PATH:$GO_FALLBACK_DIR\""
  else
    lack "Go >= ${go_needed:-1.26} (the control plane is built from Go modules): $go_hint"
  fi
else
  go_version=$(go env GOVERSION 2>/dev/null | sed 's/^go//')
  go_toolchain=$(go env GOTOOLCHAIN 2>/dev/null)
  at_least() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n 1)" = "$2" ]; }
  if [ -z "$go_version" ]; then
    lack "Go >= ${go_needed:-1.26} (\`go env GOVERSION\` answered nothing: a Go older than 1.21): $go_hint"
  elif [ -z "$go_needed" ] || at_least "$go_version" "$go_needed"; then
    found+=("go$go_version")
  elif [ "${go_toolchain%%+*}" = "local" ]; then
    lack "Go >= $go_needed (go$go_version with GOTOOLCHAIN=local cannot fetch go$go_needed): unset GOTOOLCHAIN (auto fetches it through the module proxy), or $go_hint"
  else
    found+=("go$go_version (fetches go$go_needed: GOTOOLCHAIN=${go_toolchain:-auto})")
  fi
fi

# -- openssl: every certificate and key of the local stack
if command -v openssl >/dev/null 2>&1; then
  found+=("openssl")
else
  lack "openssl (the local cluster's and Temporal's certificates): apt-get install openssl"
fi

# -- nginx with http_ssl, http_v2 and grpc: the mTLS terminator in front of Temporal
nginx=$(command -v nginx 2>/dev/null || true)
if [ -z "$nginx" ]; then
  IFS=: read -r -a sbin_dirs <<<"$SBIN_DIRS"
  for dir in "${sbin_dirs[@]}"; do
    if [ -n "$dir" ] && [ -x "$dir/nginx" ]; then nginx=$dir/nginx; break; fi
  done
fi
nginx_hint="apt-get install nginx-light (any nginx with the http_ssl, http_v2 and grpc modules)"
if [ -z "$nginx" ]; then
  lack "nginx (the mutual-TLS terminator in front of Temporal; looked for on PATH and in ${SBIN_DIRS:-no other folder}): $nginx_hint"
else
  configure=$("$nginx" -V 2>&1)
  lacks_modules=()
  case "$configure" in *--with-http_ssl_module*) ;; *) lacks_modules+=(http_ssl) ;; esac
  case "$configure" in *--with-http_v2_module*) ;; *) lacks_modules+=(http_v2) ;; esac
  case "$configure" in *--without-http_grpc_module*) lacks_modules+=(grpc) ;; esac
  if [ ${#lacks_modules[@]} -gt 0 ]; then
    lack "nginx with the http_ssl, http_v2 and grpc modules ($nginx lacks ${lacks_modules[*]}): $nginx_hint"
  else
    found+=("nginx")
  fi
fi

if [ "$target" = test ]; then
  # -- PostgreSQL's server binaries (initdb, postgres): the production Temporal's database
  initdb=""
  for candidate in "$POSTGRES_ROOT"/*/bin/initdb; do
    [ -x "$candidate" ] && initdb=$candidate
  done
  [ -n "$initdb" ] || initdb=$(command -v initdb 2>/dev/null || true)
  if [ -n "$initdb" ]; then
    found+=("postgresql ($(dirname "$initdb"))")
  else
    lack "PostgreSQL server binaries (initdb and postgres, in $POSTGRES_ROOT/*/bin or on PATH: the prodtemporal tests' database; no service needs to run): apt-get install postgresql"
  fi
  # -- Chromium: the browser test (tests/ui/, marker browser) drives the Temporal Web UI in it
  chromium=${AI_INFERENCE_CHROMIUM:-}
  if [ -n "$chromium" ]; then
    [ -x "$chromium" ] || chromium=""
  else
    for candidate in chromium chromium-browser google-chrome; do
      chromium=$(command -v "$candidate" 2>/dev/null) && break
    done
  fi
  if [ -n "$chromium" ]; then
    found+=("chromium")
  else
    lack "Chromium (the browser test drives the Temporal Web UI in it with Playwright; looked for ${AI_INFERENCE_CHROMIUM:-chromium, chromium-browser and google-chrome on PATH}): apt-get install chromium"
  fi
  # -- git and tar: the upgrade tests take the previous release from the history (git archive)
  for tool in git tar; do
    if command -v "$tool" >/dev/null 2>&1; then
      found+=("$tool")
    else
      lack "$tool (the upgrade tests read the previous release with git archive): apt-get install $tool"
    fi
  done
fi

if [ ${#missing[@]} -gt 0 ]; then
  {
    echo "prerequisites ($target): ${#missing[@]} missing; nothing was built. Install, then run again:"
    for line in "${missing[@]}"; do echo "  - $line"; done
  } >&2
  exit 1
fi
printf 'prerequisites (%s): all present (%s' "$target" "${found[0]}"
printf ', %s' "${found[@]:1}"
printf ')\n'
