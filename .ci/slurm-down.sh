#!/usr/bin/env bash
# Stop the single-node SLURM that .ci/slurm-up.sh started: each daemon by the
# PID it recorded, then remove the slurm.conf and state it wrote. Does nothing
# on a machine where slurm-up.sh started nothing (a real cluster is left alone).
set -u
STATE=${PERFGRID_SLURM_DIR:-/tmp/perfgrid-slurm}
CONF=/etc/slurm/slurm.conf
MARK="# written by perfgrid .ci/slurm-up.sh"
say() { echo "slurm-down: $*" >&2; }

if ! [ -f "$STATE/started" ]; then
    say "nothing started by slurm-up.sh ($STATE/started missing)"
    exit 0
fi
# Jobs first, so no step is left behind on the node.
if [ -f "$CONF" ] && grep -qF "$MARK" "$CONF"; then
    timeout 10 scancel --full --quiet --user=root 2>/dev/null || true
fi
stop() {  # stop NAME PIDFILE: TERM, wait up to 10 s, then KILL
    local name=$1 file=$2 pid
    [ -s "$file" ] || return 0
    pid=$(cat "$file")
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && { say "$name ($pid) ignored TERM; killing"; kill -KILL "$pid"; }
        say "stopped $name ($pid)"
    fi
    rm -f "$file"
}
stop slurmd "$STATE/run/slurmd.pid"
stop slurmctld "$STATE/run/slurmctld.pid"
stop munged "$STATE/munge/munged.pid"
if [ -f "$CONF" ] && grep -qF "$MARK" "$CONF"; then
    rm -f "$CONF"
fi
rm -rf "$STATE"
