#!/usr/bin/env bash
# Runs the README's "60 seconds" block exactly as written (between the story markers) the way
# a careful paste runs it, under `set -eu`: any command that fails fails the run (not pipefail:
# an emission waiting for approval exits 1 by design; `jq -e` catches a missing field). It
# uses the revl on PATH;
# crates/revl/tests/it/rough_edges.rs runs it with the binary under test.
set -euo pipefail
readme="$(dirname "$0")/../README.md"
story="$(sed -n '/<!-- story:start -->/,/<!-- story:end -->/p' "$readme" | sed -e '1,2d' -e '$d' | sed -e '$d')"
[ -n "$story" ] || { echo "readme_story: no story block in $readme" >&2; exit 2; }
exec bash -eu -c "$story"
