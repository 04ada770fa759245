#!/usr/bin/env bash
# pip install of this tree, and the Python package's tests (tests/python, pytest) against the
# package as installed, run from another folder:
#   1. a wheel of the tree (pip wheel: build isolation fetches scikit-build-core from PyPI; the
#      CMake build is kept in BUILD/pip-build, so that a second run compiles only what changed);
#   2. a fresh virtual environment where `pip install <tree>` is done as a user does it, then
#      `import cohort` and `cohort --version` from another folder, no COHORT_LIB;
#   3. the wheel installed (--target) for scripts/pyenv's test environment (Keras on JAX, onnx,
#      onnxruntime, pytest): every test but the torch ones, strict (a missing module fails);
#   4. the same files for Debian's python3 (python3-torch, python3-pytest): the torch tests.
# Skipped (77) under the sanitizers: an instrumented library does not load into Python.
set -euo pipefail
[ -n "${COHORT_SANITIZED:-}" ] && { echo "t_pip.sh: skipped under the sanitizers"; exit 77; }
SRC=$(cd "${COHORT_SRC:-$(dirname "$0")/..}" && pwd)
BUILD=$(cd "${COHORT_BUILD:-$SRC/build}" && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
unset COHORT_LIB PYTHONPATH
py=$("$SRC/scripts/pyenv" test)
quiet() { # run "$@" with its output in a log, shown when it fails
    if ! "$@" >"$T/log" 2>&1; then
        tail -n 40 "$T/log"
        echo "t_pip.sh: FAILED: $*"
        exit 1
    fi
}
step() { echo "t_pip.sh: $*"; }

step "pip wheel $SRC"
quiet "$py" -m pip wheel --no-deps --disable-pip-version-check -w "$T/dist" "$SRC" \
    --config-settings=build-dir="$BUILD/pip-build"
wheel=$(ls "$T"/dist/cohort-*.whl)
step "built $(basename "$wheel")"

step "pip install $SRC in a fresh virtual environment"
quiet /usr/bin/python3 -m venv "$T/fresh"
quiet "$T/fresh/bin/pip" install --disable-pip-version-check "$SRC" --config-settings=build-dir="$BUILD/pip-build"
mkdir "$T/elsewhere"
got=$(cd "$T/elsewhere" && "$T/fresh/bin/python" -c 'import cohort; print(cohort._find_library())')
case "$got" in
    "$T/fresh/lib/"*/site-packages/cohort/libcohort.so) ;;
    *) echo "t_pip.sh: FAILED: import cohort loads $got"; exit 1 ;;
esac
version=$(cd "$T/elsewhere" && "$T/fresh/bin/cohort" --version)
want=$(sed -n 's/^project(cohort VERSION \([0-9.]*\).*/\1/p' "$SRC/CMakeLists.txt")
[ "$version" = "cohort $want" ] || { echo "t_pip.sh: FAILED: cohort --version: $version"; exit 1; }
step "import cohort and '$version' from another folder"

quiet "$py" -m pip install --no-deps --disable-pip-version-check --target "$T/site" "$wheel"
export PYTHONPATH="$T/site" PATH="$T/site/bin:$PATH" COHORT_PYTEST_STRICT=1
export KERAS_BACKEND=${KERAS_BACKEND:-jax}
cd "$T/elsewhere"
rc=0
step "pytest (scripts/pyenv test)"
"$py" -m pytest -q -p no:cacheprovider -W ignore::DeprecationWarning "$SRC/tests/python" \
    --ignore "$SRC/tests/python/test_torch.py" --ignore "$SRC/tests/python/test_torch_seq.py" \
    -k "not test_docs_torch" || rc=1
step "pytest (Debian's python3 and python3-torch): the torch tests"
/usr/bin/python3 -m pytest -q -p no:cacheprovider "$SRC/tests/python/test_torch.py" \
    "$SRC/tests/python/test_torch_seq.py" "$SRC/tests/python/test_docs.py::test_docs_torch" || rc=1
exit $rc
