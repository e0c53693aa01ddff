#!/bin/sh
# memmachine container entrypoint.
#
# 1. For every MEMMACHINE_<NAME>_FILE variable (Docker/compose secrets), read the file and
#    export MEMMACHINE_<NAME> with its content (trailing newline dropped). Setting both
#    MEMMACHINE_<NAME> and MEMMACHINE_<NAME>_FILE is an error.
# 2. Arguments starting with "-" are options for `memmachine serve`.
# 3. exec the command, so memmachine is PID 1's direct replacement and gets SIGTERM.
#
# Waiting for the databases is not done here: memmachine retries each store itself, up to
# MEMMACHINE_STARTUP_TIMEOUT_SECONDS, and exits 1 naming the store it could not reach.
set -eu

fail() {
    echo "memmachine-entrypoint: $*" >&2
    exit 64
}

for pair in $(env | sed -n 's/^\(MEMMACHINE_[A-Z0-9_]*\)_FILE=.*/\1/p'); do
    name="$pair"
    file_var="${name}_FILE"
    eval "isset=\${$file_var+set}"
    [ "${isset:-}" = "set" ] || continue  # a line of some multi-line value, not a variable
    eval "file=\${$file_var}"
    eval "already=\${$name+set}"
    if [ "${already:-}" = "set" ]; then
        fail "both $name and $file_var are set; use one"
    fi
    [ -r "$file" ] || fail "$file_var: cannot read $file"
    value="$(cat "$file")"
    export "$name=$value"
    unset "$file_var"
done

if [ -n "${MEMMACHINE_CONFIG:-}" ] && [ ! -r "$MEMMACHINE_CONFIG" ]; then
    fail "MEMMACHINE_CONFIG: cannot read $MEMMACHINE_CONFIG"
fi

if [ "$#" -eq 0 ] || [ "${1#-}" != "$1" ]; then
    set -- memmachine serve "$@"
fi
exec "$@"
