#!/bin/sh
# mp_fault.sh - run a fault-injection test under weftrun and check how the job ended.
#
# Usage: mp_fault.sh WEFTRUN PROG NRANKS EXPECTED_RC EXPECTED_PASS
#
# Runs `WEFTRUN --grace 20 -n NRANKS -- PROG` with TMPDIR pointing to a fresh private
# directory, prints its output, and fails (exit 1) unless:
#   - weftrun exited with EXPECTED_RC (137 when a rank killed itself with SIGKILL);
#   - exactly EXPECTED_PASS lines read "PASS <prog> rank=..." and none reads "FAIL";
#   - nothing new is left in /dev/shm, the private TMPDIR is empty, and no new entry of /tmp is
#     a socket or has "weft" in its name.
set -u

if [ $# -ne 5 ]; then
    echo "usage: $0 WEFTRUN PROG NRANKS EXPECTED_RC EXPECTED_PASS" >&2
    exit 2
fi
weftrun=$1
prog=$2
nranks=$3
want_rc=$4
want_pass=$5
name=$(basename "$prog")
export LC_ALL=C

work=$(mktemp -d /tmp/mpfault.XXXXXX) || exit 1
mkdir "$work/tmp"
ls -A /dev/shm 2>/dev/null | sort >"$work/shm.before"
ls -A /tmp | sort >"$work/tmp.before"

start=$(date +%s)
TMPDIR="$work/tmp" "$weftrun" --grace 20 -n "$nranks" -- "$prog" >"$work/out" 2>&1
rc=$?
end=$(date +%s)
cat "$work/out"

status=0
fail() {
    echo "mp_fault.sh: FAIL $name n=$nranks: $*"
    status=1
}

[ "$rc" -eq "$want_rc" ] || fail "weftrun exited $rc, expected $want_rc"
pass=$(grep -c "PASS $name rank=" "$work/out")
[ "$pass" -eq "$want_pass" ] || fail "$pass PASS lines, expected $want_pass"
if grep -q "FAIL" "$work/out"; then
    fail "FAIL lines in the output"
fi

ls -A /dev/shm 2>/dev/null | sort >"$work/shm.after"
new_shm=$(comm -13 "$work/shm.before" "$work/shm.after")
[ -z "$new_shm" ] || fail "left in /dev/shm: $new_shm"

left_tmp=$(ls -A "$work/tmp")
[ -z "$left_tmp" ] || fail "left in TMPDIR: $left_tmp"

ls -A /tmp | sort >"$work/tmp.after"
for f in $(comm -13 "$work/tmp.before" "$work/tmp.after"); do
    case "$f" in
    # Anything weft left would be named weft-*; other jobs' temporaries may only contain the word.
    weft* | WEFT*) fail "left in /tmp: $f" ;;
    *) [ -S "/tmp/$f" ] && fail "socket left in /tmp: $f" ;;
    esac
done

echo "mp_fault.sh: $name n=$nranks: weftrun exit $rc, $pass PASS lines, $((end - start)) s"
rm -rf "$work"
exit $status
