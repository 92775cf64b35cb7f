# Sourced by the bench scripts: $out is the folder their grids write to,
# OUT when set (created, and kept), else a temporary one removed at exit.
out=${OUT:-}
if [ -z "$out" ]; then
    out=$(mktemp -d)
    trap 'rm -rf "$out"' EXIT
else
    mkdir -p "$out" || exit 1
fi
