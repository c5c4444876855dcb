#!/usr/bin/env bash
# Install everything liqo-stack needs on a new machine: the Python environment (.venv) and the
# pinned Go-built binaries (cached outside the repository; a warm machine rebuilds nothing).
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS

# tools/build.py needs only the standard library: it starts first and builds while the Python packages
# install (they mostly wait for the network, the build for the CPU).
echo "bootstrap: building pinned Go binaries (tools/toolchain.toml) in the background" >&2
python3 tools/build.py >&2 &
build=$!

# The interpreter .venv is made from: LIQO_STACK_PYTHON if set; else, of `python3` and the system's
# /usr/bin/python3, a Python >= 3.11 with libpython linked into its executable (a distribution's build, as
# Debian's), else the first >= 3.11. pyenv's default build (libpython shared, no profile-guided
# optimisation) ran the suite's Python about a quarter slower (docs/performance.md, nineteenth session).
venv_interpreter() {  # the candidates, in order of preference
  # the executable itself, not a wrapper on PATH (a pyenv shim is a shell script), if it is 3.11 or newer and
  # can make a venv (Debian's needs its python3-venv package for ensurepip)
  local probe='import sys, ensurepip, venv; print(sys.executable if sys.version_info >= (3, 11) else "")'
  local candidate real fallback=""
  if [ -n "${LIQO_STACK_PYTHON:-}" ]; then
    real=$("$LIQO_STACK_PYTHON" -c "$probe" 2>/dev/null) || real=""
    if [ -z "$real" ]; then
      echo "bootstrap: LIQO_STACK_PYTHON=$LIQO_STACK_PYTHON is not a Python 3.11 or newer that can make a venv:" \
        "point it at one, or unset it to let bootstrap choose" >&2
      return 2
    fi
    echo "$LIQO_STACK_PYTHON"
    return
  fi
  for candidate in "$@"; do
    real=$("$candidate" -c "$probe" 2>/dev/null) || continue
    [ -n "$real" ] || continue
    if [[ "$(ldd "$real" 2>/dev/null)" != *libpython* ]]; then
      echo "$real"
      return
    fi
    fallback=${fallback:-$real}
  done
  echo "${fallback:-python3}"
}
if [ ! -x .venv/bin/python ]; then
  interpreter=$(venv_interpreter python3 /usr/bin/python3) || exit 2
  echo "bootstrap: creating .venv ($interpreter, Python $("$interpreter" -c 'import platform; print(platform.python_version())'))" >&2
  "$interpreter" -m venv .venv
fi
# uv installs the packages: pip took 37 s to install them from its cache into a new .venv, uv takes 2-3 s.
# It is pinned and kept beside the Go binaries' cache, so a warm machine fetches nothing.
uv_version=0.13.9
uv_dir="${LIQO_STACK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/liqo-stack}/uv-$uv_version"
if [ ! -x "$uv_dir/bin/uv" ]; then
  echo "bootstrap: fetching uv $uv_version into $uv_dir" >&2
  mkdir -p "$(dirname "$uv_dir")"
  fetched=$(mktemp -d "$uv_dir.XXXXXX")
  if python3 -m pip install --quiet --disable-pip-version-check --target "$fetched" "uv==$uv_version" >&2; then
    mv -T "$fetched" "$uv_dir" 2>/dev/null || rm -rf "$fetched"  # another bootstrap got there first
  else
    rm -rf "$fetched"
  fi
fi
echo "bootstrap: installing Python packages (pinned in pyproject.toml)" >&2
pip_status=0
if [ -x "$uv_dir/bin/uv" ]; then
  # one line per package installed and uv's summary, its errors among them, on stderr. Compiled as pip
  # does: PYTHONDONTWRITEBYTECODE (set on some machines) would otherwise leave every process to
  # compile pulumi, grpc and pydantic again at each import.
  "$uv_dir/bin/uv" pip install --compile-bytecode --python .venv/bin/python -e '.[dev]' 2>&1 \
    | sed -e 's/^/bootstrap:   /' >&2 || pip_status=$?
else
  echo "bootstrap: uv $uv_version could not be fetched (above): installing with pip instead, slower" >&2
  # one line per package pip fetches; errors pass unfiltered on stderr
  .venv/bin/python -m pip install --progress-bar off --disable-pip-version-check -e '.[dev]' \
    | sed -n -e 's/^\(Collecting\|Successfully installed\) /bootstrap:   \1 /p' >&2 || pip_status=$?
fi
if [ "$pip_status" -eq 0 ]; then
  # The editable install leaves the checkout's own modules uncompiled; where PYTHONDONTWRITEBYTECODE is set,
  # every Pulumi program, CLI and runtime process then compiled liqo_stack and runtime again
  # (docs/performance.md, the tenth session). Stale files are harmless: Python checks each against its source.
  .venv/bin/python -m compileall -q -j 0 liqo_stack runtime tests >/dev/null || true
  echo "bootstrap: Python packages ready in $((SECONDS - started))s; waiting for the Go binaries" >&2
else
  echo "bootstrap: pip install failed (exit $pip_status); waiting for the Go build to stop" >&2
fi

build_status=0
wait "$build" || build_status=$?
if [ "$build_status" -ne 0 ]; then
  echo "bootstrap: tools/build.py failed (exit $build_status): see the build log it named above" >&2
  exit "$build_status"
fi
echo "bootstrap: Python packages and Go binaries ready after $((SECONDS - started))s" >&2
exit "$pip_status"
