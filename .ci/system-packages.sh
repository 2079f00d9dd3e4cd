#!/usr/bin/env bash
# Install the Debian packages perfgrid compares against, or say why not.
# Outside CI it never fails: a missing tool makes its benchmark rows (and tests)
# skipped with a reason. In CI (CI=true) a package that is still missing at the end
# fails with exit status 1, naming it: CI must not pass by skipping.
set -u
strict() { case "${CI:-}" in ""|0|false|no) return 1 ;; *) return 0 ;; esac; }
# Exit 0 (1 in CI) after saying which packages are missing and why.
give_up() {
    if strict; then
        echo "perfgrid: CI: $* (CI=${CI}: every tool must be here; failing)" >&2
        exit 1
    fi
    echo "perfgrid: $*" >&2
    exit 0
}
declare -A tool_of=([fio]=fio [apache2-utils]=ab [gcc]=cc [erlang-nox]=erl [chromium]=chromium
                 [linux-perf]=perf)
missing=()
for pkg in "$@"; do
    tool=${tool_of[$pkg]:-$pkg}
    command -v "$tool" >/dev/null 2>&1 || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
    give_up "no apt-get here; rows needing ${missing[*]} will be skipped"
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo="sudo -n"; else
        give_up "not root and no sudo; rows needing ${missing[*]} will be skipped"
    fi
fi
echo "perfgrid: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >/dev/null 2>&1 || true
if ! $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
    echo "perfgrid: apt-get could not install ${missing[*]}" >&2
fi
still=()
for pkg in "${missing[@]}"; do
    tool=${tool_of[$pkg]:-$pkg}
    command -v "$tool" >/dev/null 2>&1 || still+=("$pkg (${tool})")
done
[ ${#still[@]} -eq 0 ] && exit 0
give_up "still missing after apt-get: ${still[*]}; their rows will be skipped"
