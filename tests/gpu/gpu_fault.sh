#!/bin/sh
# gpu_fault.sh - run gpu_fault (a rank SIGKILLs itself) under weftrun and check how the job ended.
#
# Usage: gpu_fault.sh WEFTRUN PROG NRANKS [PROG_ARGS...]
#
# Runs `WEFTRUN --grace 20 -n NRANKS -- PROG PROG_ARGS...` with TMPDIR pointing to a fresh
# private directory, prints its output, and exits
#   77 when every rank skipped (no CUDA device: the ranks print "SKIP: ..." and exit 77):
#      weftrun exited 77 and exactly NRANKS lines start with "SKIP:";
#   0  when weftrun exited 137 (the victim's SIGKILL), exactly NRANKS - 1 lines read
#      "PASS <prog> rank=...", none reads "FAIL", the private TMPDIR is empty and no new entry
#      of /tmp or /dev/shm has "weft" in its name;
#   1  otherwise.
# (Unlike tests/mp/mp_fault.sh it does not require /dev/shm to be unchanged: the CUDA driver and
# MPS keep their own files there.)
set -u

if [ $# -lt 3 ]; then
    echo "usage: $0 WEFTRUN PROG NRANKS [PROG_ARGS...]" >&2
    exit 2
fi
weftrun=$1
prog=$2
nranks=$3
shift 3
name=$(basename "$prog")
what="$name${1:+ $*} n=$nranks"
export LC_ALL=C

work=$(mktemp -d /tmp/gpufault.XXXXXX) || exit 1
mkdir "$work/tmp"
ls -A /dev/shm 2>/dev/null | sort >"$work/shm.before"
ls -A /tmp | sort >"$work/tmp.before"

start=$(date +%s)
TMPDIR="$work/tmp" "$weftrun" --grace 20 -n "$nranks" -- "$prog" "$@" >"$work/out" 2>&1
rc=$?
end=$(date +%s)
cat "$work/out"

status=0
fail() {
    echo "gpu_fault.sh: FAIL $what: $1"
    status=1
}

skips=$(grep -c "^SKIP:" "$work/out")
if [ "$rc" -eq 77 ] && [ "$skips" -eq "$nranks" ]; then
    echo "gpu_fault.sh: $what: skipped"
    rm -rf "$work"
    exit 77
fi
if [ "$rc" -eq 77 ] || [ "$skips" -ne 0 ]; then
    fail "weftrun exited $rc with $skips SKIP lines: a skip needs exit 77 and one per rank ($nranks)"
fi

[ "$rc" -eq 137 ] || fail "weftrun exited $rc, expected 137 (the victim's SIGKILL)"
want=$((nranks - 1))
pass=$(grep -c "PASS $name rank=" "$work/out")
[ "$pass" -eq "$want" ] || fail "$pass PASS lines, expected $want"
if grep -q "FAIL" "$work/out"; then
    fail "FAIL lines in the output"
fi

left_tmp=$(ls -A "$work/tmp")
[ -z "$left_tmp" ] || fail "left in TMPDIR: $left_tmp"
ls -A /dev/shm 2>/dev/null | sort >"$work/shm.after"
ls -A /tmp | sort >"$work/tmp.after"
for f in $(comm -13 "$work/shm.before" "$work/shm.after") \
    $(comm -13 "$work/tmp.before" "$work/tmp.after"); do
    case "$f" in
    # Anything weft left would be named weft-*; other jobs' temporaries may only contain the word.
    weft* | WEFT*) fail "left behind: $f" ;;
    esac
done

echo "gpu_fault.sh: $what: weftrun exit $rc, $pass PASS lines, $((end - start)) s"
rm -rf "$work"
exit $status
