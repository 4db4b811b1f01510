#!/bin/bash
# Run one scripted session (file effects, provisions, step-back, fork, abort, recover, exec,
# commit, a hand edit for verify) with a revl binary and keep every JSON document, every
# text rendering and both WALs, normalised (session ids, times, CRCs and 64-hex digests
# replaced). Two binaries agree when their OUTDIRs hold the same *.norm files:
#
#   scripts/same-output.sh OLD_REVL /tmp/old && scripts/same-output.sh NEW_REVL /tmp/new
#   for f in /tmp/old/*.norm; do cmp "$f" "/tmp/new/${f##*/}"; done
#
# usage: same-output.sh BIN OUTDIR   (needs python3)
set -e
BIN=$1; OUT=$2; rm -rf $OUT; mkdir -p $OUT/ws
export REVL_STORE=$OUT/store
S=$($BIN new --workspace $OUT/ws --json | python3 -c 'import json,sys;print(json.load(sys.stdin)["session"])')
$BIN write $S a.txt --content hello >/dev/null
head -c 6000 /dev/zero | tr '\0' 'x' > $OUT/big
$BIN write $S big.txt --from $OUT/big >/dev/null
$BIN write $S a.txt --content hello2 >/dev/null
$BIN mkdir $S d/e >/dev/null
$BIN write $S d/e/f.txt --content inner >/dev/null
$BIN rename $S a.txt d/a.txt >/dev/null
$BIN chmod $S big.txt 600 >/dev/null
$BIN provide $S k v1 >/dev/null
$BIN boundary $S --label t >/dev/null
$BIN delete $S d >/dev/null
$BIN provide $S k v2 >/dev/null
$BIN step-back $S --to 9 --json > $OUT/sb.json
$BIN verify $S --json > $OUT/verify.json
$BIN timeline $S --json > $OUT/timeline.json
$BIN fork $S --at 3 --json > $OUT/fork.json
H=$(python3 -c 'import json;print(json.load(open("'$OUT'/fork.json"))["hash"])')
$BIN fork-confirm $S --hash $H --json > $OUT/confirm.json
B=$(python3 -c 'import json;print(json.load(open("'$OUT'/confirm.json"))["branch"])')
$BIN write $B z.txt --content zz >/dev/null
$BIN abort $B --json > $OUT/abort.json
$BIN recover $B --json > $OUT/recover.json || true
$BIN status $S --json > $OUT/status.json
$BIN status $S > $OUT/status.txt
$BIN timeline $S > $OUT/timeline.txt
$BIN verify $S > $OUT/verify.txt
$BIN inspect $S --at 3 --json > $OUT/inspect.json
$BIN status $B > $OUT/status-b.txt || true
S2=$($BIN new --workspace $OUT/ws2 --json | python3 -c 'import json,sys;print(json.load(sys.stdin)["session"])')
$BIN write $S2 x.txt --content 1 > $OUT/write.txt
$BIN provide $S2 k v > $OUT/provide.txt
$BIN exec $S2 -- sh -c 'echo hi; echo err >&2' > $OUT/exec.txt
$BIN exec $S2 --json -- true > $OUT/exec.json
$BIN commit $S2 > $OUT/commit.txt
$BIN commit $S2 --json > $OUT/commit.json
$BIN commit-confirm $S2 --hash 00 --json > $OUT/cc-stale.json || true
H2=$(python3 -c 'import json;print(json.load(open("'$OUT'/commit.json"))["hash"])')
$BIN commit-confirm $S2 --hash $H2 --json > $OUT/cc.json
echo 'hand' > $OUT/ws2/x.txt
$BIN verify $S2 > $OUT/verify2.txt || true
$BIN verify $S2 --json > $OUT/verify2.json || true
cat $REVL_STORE/sessions/$S/wal.jsonl > $OUT/wal-parent.jsonl
cat $REVL_STORE/sessions/$B/wal.jsonl > $OUT/wal-branch.jsonl
for f in $OUT/*.json $OUT/*.jsonl $OUT/*.txt; do
  sed -E -e "s/$S2/SESSION2/g" -e "s/$S/SESSION/g" -e "s/$B/BRANCH/g" -e 's/"ts": ?"[^"]*"/"ts":"T"/g' -e 's/"crc":"[0-9a-f]{8}"/"crc":"C"/g' -e "s#$OUT#OUT#g" -e 's/[0-9a-f]{64}/H64/g' -e 's/"createdBy":"[^"]*"/"createdBy":"X"/' $f > $f.norm
done
