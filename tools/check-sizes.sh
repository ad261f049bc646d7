#!/usr/bin/env bash
# check-sizes — the house limits on size: no function over 200 lines (libcore/, apps/,
# kernels/) and no .c file over 800 lines (libcore/, apps/).
#
#   tools/check-sizes.sh            report every function and file over its limit; exit 0
#   tools/check-sizes.sh --strict   the same, and exit 1 when anything is over
#   FUNC_MAX=N tools/check-sizes.sh  another function limit, to see what comes next
#
# A function is a top-level brace block whose header (the text since the previous
# top-level `;` or `}`) holds a `(` and no `=`: that tells a definition from an
# initialiser or a struct. Its length runs from the opening brace's line to the closing
# one's. Braces inside comments, strings, character constants and preprocessor lines do
# not count, and an `extern "C" {` block is looked into, not measured. Flat lists of
# layer calls in kernels/ are reported like any other function.
set -euo pipefail
cd "$(dirname "$0")/.."

strict=0
case "${1:-}" in
    --strict) strict=1 ;;
    "") ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "usage: tools/check-sizes.sh [--strict]" >&2; exit 2 ;;
esac

FUNC_MAX=${FUNC_MAX:-200}
FILE_MAX=800

mapfile -t sources < <(find libcore apps kernels -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' \) | LC_ALL=C sort)

over=0
funcs=$(awk -v max="$FUNC_MAX" -v q="'" '
    FNR == 1 { depth = 0; incomment = 0; header = ""; cont = 0; externc = 0 }
    {
        line = $0
        # preprocessor lines and their continuations
        if (cont) { cont = (line ~ /\\$/); next }
        if (!incomment && line ~ /^[ \t]*#/) { cont = (line ~ /\\$/); next }
        # comments: finish an open block comment, then strip the rest
        out = ""
        while (length(line) > 0) {
            if (incomment) {
                e = index(line, "*/")
                if (e == 0) { line = ""; break }
                line = substr(line, e + 2); incomment = 0
                continue
            }
            s = index(line, "/*")
            if (s == 0) { out = out line; line = ""; break }
            out = out substr(line, 1, s - 1); line = substr(line, s + 2); incomment = 1
        }
        line = out
        gsub(/\\\\/, "", line)
        gsub(/\\"/, "", line)
        gsub("\\\\" q, "", line)
        gsub(q "\"" q, "0", line)
        gsub(/"[^"]*"/, "\"\"", line)
        gsub(q "[^" q "]*" q, "0", line)
        sub(/\/\/.*/, "", line)
        n = length(line)
        for (i = 1; i <= n; i++) {
            c = substr(line, i, 1)
            if (c == "{") {
                if (depth == 0) {
                    if (header ~ /extern[ \t]*""[ \t]*$/) { externc = 1; header = ""; continue }
                }
                if (depth == externc) {
                    isfunc = (header ~ /\(/ && header !~ /=/)
                    if (isfunc) {
                        h = header; gsub(/__launch_bounds__[ \t]*\([^)]*\)/, "", h); sub(/\(.*/, "", h); sub(/[ \t]+$/, "", h)
                        m = split(h, w, /[^A-Za-z0-9_]+/); name = w[m]
                        start = FNR
                    }
                }
                depth++
            } else if (c == "}") {
                if (depth == externc && externc) { externc = 0; header = ""; continue }
                depth--
                if (depth == externc) {
                    if (isfunc && FNR - start + 1 > max)
                        printf "%s:%d: function %s is %d lines (limit %d)\n", FILENAME, start, name, FNR - start + 1, max
                    isfunc = 0; header = ""
                }
            } else if (depth == externc) {
                if (c == ";") header = ""
                else header = header c
            }
        }
        if (depth == externc) header = header " "
    }
' "${sources[@]}")
if [ -n "$funcs" ]; then
    echo "$funcs"
    over=$((over + $(printf '%s\n' "$funcs" | wc -l)))
fi

while IFS= read -r f; do
    n=$(wc -l < "$f")
    if [ "$n" -gt "$FILE_MAX" ]; then
        echo "$f: file is $n lines (limit $FILE_MAX)"
        over=$((over + 1))
    fi
done < <(find libcore apps -type f -name '*.c' | LC_ALL=C sort)

if [ "$over" -eq 0 ]; then
    echo "check-sizes: every function within $FUNC_MAX lines, every .c file within $FILE_MAX"
    exit 0
fi
echo "check-sizes: $over over the limits"
[ "$strict" -eq 1 ] && exit 1
exit 0
