# Sourced by accel/sanitize.sh, accel/fuzz.sh and accel/coverage.sh: a temporary copy of the project in which kachedb_radix.accel._radix is rebuilt in place with
# other flags, so the checkout's own build is never touched.
#
#   source "$(dirname "${BASH_SOURCE[0]}")/workcopy.sh" NAME
#
# sets root (the checkout), caller (the directory it was called from), python ($PYTHON
# or python) and work (the copy: /tmp/accel-NAME.XXXXXX, removed on exit unless KEEP=1),
# copies the C sources, accel/, reference/, spec/, the import root and what pyproject.toml
# names into it, puts the copy's import root on PYTHONPATH, and defines build_in_place CC
# CFLAGS LDFLAGS (a test build, hooks included) and check_built (the import must load the
# copy's build, not another one).
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
caller="$PWD"
python="${PYTHON:-python}"
work="$(mktemp -d "${TMPDIR:-/tmp}/accel-$1.XXXXXX")"
if [[ "${KEEP:-0}" != "1" ]]; then
    trap 'rm -rf "$work"' EXIT
fi
echo "$1: building in $work"

mkdir -p "$work/accel/blockpool" "$work/tests"
cp "$root"/accel/*.c "$root"/accel/*.h "$root"/accel/*.py "$root"/accel/*.pyi "$work/accel/"
cp -r "$root/accel/vendor" "$work/accel/"  # xxHash, vendored (accel/vendor/README.md)
cp "$root"/accel/blockpool/*.py "$work/accel/blockpool/"
cp -r "$root/reference" "$root/spec" "$work/"
cp "$root/pyproject.toml" "$root/README.md" "$root/LICENSE" "$work/"
# The import root's links (kachedb_radix/{reference,accel,spec} -> the copy's folders): with it
# first on the path, `import kachedb_radix.accel` loads the copy's build, not the checkout's
# editable install (check_built makes sure).
mkdir -p "$work/.ci"
cp -a "$root/.ci/import-root" "$work/.ci/"
export PYTHONPATH="$work/.ci/import-root"

# The test build: the C twin with its test hooks (corrupt.c, KACHEDB_RADIX_TEST_HOOKS), which
# the tests these scripts run need and the wheel never has.
build_in_place() {
    (
        cd "$work"
        CC="$1" CFLAGS="$2 -DKACHEDB_RADIX_TEST_HOOKS" LDFLAGS="$3" \
            "$python" -c 'from setuptools import setup; setup()' -q build_ext --inplace --force \
            >/dev/null
    )
}

check_built() {
    local built
    built="$(cd "$work" && "$python" -c 'import kachedb_radix.accel._radix as m; print(m.__file__)')"
    case "$built" in
        "$work"/*) echo "$1: using $built" ;;
        *) echo "$1: picked up $built instead of the build in $work" >&2; exit 1 ;;
    esac
}
