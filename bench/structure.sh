#!/usr/bin/env bash
# The house in figures (issue 50): code size, files, the largest files and functions, and how
# many files still name the ZooKeeper client crate or count their own writes, for a checkout.
#
# What it counts: src/**/*.rs but test files (`tests.rs`, anything under a `tests/` folder);
# lines that are not blank. A function's length is from its `fn` line to the `}` at its
# indentation (test modules inside a file count too: rustfmt spreads their tables).
#
# Usage: bench/structure.sh [REV]     # REV: a commit to measure instead of the work tree
set -euo pipefail
cd "$(dirname "$0")/.."

dir=.
if [[ $# -gt 0 ]]; then
  dir=$(mktemp -d)
  trap 'rm -rf "$dir"' EXIT
  git archive "$1" src | tar -x -C "$dir"
fi
cd "$dir"

mapfile -t files < <(find src -name '*.rs' ! -name tests.rs ! -path '*/tests/*' | sort)
outside() { grep -l "$1" "${files[@]}" | grep -vE "^src/($2)(/|\.rs$)" | wc -l; }

echo "== ${1:-work tree}"
echo "files                                      ${#files[@]}"
echo "non-blank lines                            $(cat "${files[@]}" | grep -cv '^\s*$')"
echo "files naming zookeeper_client outside zk   $(outside zookeeper_client zk)"
echo "... outside zk and the ledger              $(outside zookeeper_client 'zk|ledger')"
echo "files counting their own writes (tally)    $(outside 'tally::wrote' zk)"
echo "largest files (lines):"
wc -l "${files[@]}" | sort -rn | sed -n 2,4p
echo "longest functions (lines, over 90):"
python3 - "${files[@]}" <<'EOF'
import re, sys
found = []
for path in sys.argv[1:]:
    lines = open(path).read().split('\n')
    i = 0
    while i < len(lines):
        m = re.match(r'^(\s*)(pub(\([^)]*\))?\s+)?(async\s+)?(const\s+)?(unsafe\s+)?fn\s+(\w+)', lines[i])
        if m and not lines[i].rstrip().endswith(';'):
            indent = len(m.group(1))
            j = i
            while j < len(lines) and '{' not in lines[j]:
                j += 1
            k = j + 1
            while k < len(lines) and not (
                lines[k].startswith(' ' * indent + '}')
                and len(lines[k]) - len(lines[k].lstrip()) == indent
            ):
                k += 1
            if k - i + 1 > 90:
                found.append((k - i + 1, path, i + 1, m.group(7)))
            i = k
        i += 1
for n, path, line, name in sorted(found, reverse=True):
    print(f"  {n:5d}  {path}:{line} {name}")
EOF
