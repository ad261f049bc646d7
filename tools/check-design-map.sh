#!/usr/bin/env bash
# check-design-map — docs/design.md stays the true map of the code (the test layers/map):
#   - every .c and .h file under libcore/ and apps/ is named in it, by its path from the
#     repository root (`libcore/comm/comm.c`);
#   - every libcore/ or apps/ .c or .h path it names exists;
#   - no file of the repository cites the design or style notes that live outside it
#     (the upper-case DESIGN and STYLE .md names): the facts are on pages of docs/.
# Prints one line per offence, naming the file; exits 1 when there is one.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

map=docs/design.md
bad=0
[ -f "$map" ] || { echo "$map: missing"; exit 1; }

# Paths the map names: whole tokens starting at libcore/ or apps/ and ending in .c or .h.
named=$(grep -oE '(^|[^A-Za-z0-9_/.-])(libcore|apps)/[A-Za-z0-9_./-]+\.[ch]([^A-Za-z0-9_]|$)' "$map" |
        sed -E 's#^[^la]*((libcore|apps)/)#\1#; s#[^A-Za-z0-9_]$##' | LC_ALL=C sort -u)
on_disk=$(find libcore apps -type f -name '*.[ch]' | LC_ALL=C sort -u)

while IFS= read -r f; do
    [ -n "$f" ] || continue
    echo "$f: not named in $map (add one line to its module's table)"; bad=1
done < <(LC_ALL=C comm -23 <(echo "$on_disk") <(echo "$named"))
while IFS= read -r f; do
    [ -n "$f" ] || continue
    echo "$map names $f, which does not exist"; bad=1
done < <(LC_ALL=C comm -13 <(echo "$on_disk") <(echo "$named"))

# The pattern is spelt in two pieces so that this file does not match it itself.
outside='(DESIGN|STYLE)''\.md'
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    files() { git ls-files -z --cached --others --exclude-standard; }
else
    files() { find . -path ./build -prune -o -path ./.git -prune -o -type f -print0 | sed -z 's#^\./##'; }
fi
while IFS= read -r hit; do
    echo "$hit: cites a note outside the repository; cite the docs/ page that holds the fact"; bad=1
done < <(files | xargs -0 -r grep -nIE "$outside" -- 2>/dev/null | cut -d: -f1,2)

[ $bad -eq 0 ] && echo "design map: every libcore/ and apps/ file named in $map, every named file present, no reference outside docs/"
exit $bad
