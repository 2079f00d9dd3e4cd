#!/usr/bin/env bash
# Install the Debian packages perfgrid compares against, or say why not.
# Never fails: a missing tool makes its benchmark rows skipped with a reason.
set -u
declare -A tool_of=([fio]=fio [apache2-utils]=ab [gcc]=cc [erlang-nox]=erl [chromium]=chromium)
missing=()
for pkg in "$@"; do
    tool=${tool_of[$pkg]:-$pkg}
    command -v "$tool" >/dev/null 2>&1 || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
    echo "perfgrid: no apt-get here; rows needing ${missing[*]} will be skipped" >&2
    exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo="sudo -n"; else
        echo "perfgrid: not root and no sudo; rows needing ${missing[*]} will be skipped" >&2
        exit 0
    fi
fi
echo "perfgrid: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >/dev/null 2>&1 || true
if ! $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
    echo "perfgrid: apt-get could not install ${missing[*]}; their rows will be skipped" >&2
fi
exit 0
