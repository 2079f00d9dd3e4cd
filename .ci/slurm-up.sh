#!/usr/bin/env bash
# A real single-node SLURM on this machine, for tests/test_slurm.py and CI.
#
#   bash .ci/slurm-up.sh     # install (Debian, as root), configure, start, wait for idle
#   bash .ci/slurm-down.sh   # stop what this script started, by PID
#
# Outside CI it never fails the caller: without root, apt-get or a working
# daemon it says why and exits 0, and tests/test_slurm.py then skips with its
# own reason. In CI (CI=true) each of those exits 1: the SLURM test must run.
# A machine that already has a working SLURM (sinfo answers) is left alone.
# Daemons run in the background without systemd; their state, logs and PID
# files live in $PERFGRID_SLURM_DIR (default /tmp/perfgrid-slurm). slurmctld
# and slurmd are addressed as 127.0.0.1 (SlurmctldHost/NodeAddr), and munged
# only has a Unix socket; SLURM itself has no listen-address setting, so the
# daemons' ports (6817, 6818) are reachable wherever this machine's are.
set -u
STATE=${PERFGRID_SLURM_DIR:-/tmp/perfgrid-slurm}
CONF=/etc/slurm/slurm.conf
MARK="# written by perfgrid .ci/slurm-up.sh"
DEBS=(munge slurmctld slurmd slurm-client)
say() { echo "slurm-up: $*" >&2; }
strict() { case "${CI:-}" in ""|0|false|no) return 1 ;; *) return 0 ;; esac; }
# Say why there is no SLURM; exit 0, or 1 in CI.
give_up() {
    if strict; then say "CI: $* (CI=${CI}: failing)"; exit 1; fi
    say "$*"
    exit 0
}

if [ -f "$STATE/started" ]; then  # ours from an earlier run: start afresh
    bash "$(dirname "$0")/slurm-down.sh"
fi
if command -v sinfo >/dev/null 2>&1 && timeout 10 sinfo -h >/dev/null 2>&1; then
    say "a SLURM cluster already answers here; leaving it alone"
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    give_up "not root: cannot install or start SLURM; tests/test_slurm.py will skip"
fi
if [ -f "$CONF" ] && ! grep -qF "$MARK" "$CONF"; then
    give_up "$CONF exists and is not ours; not touching it; tests/test_slurm.py will skip"
fi
missing=()
for cmd in munged slurmctld slurmd sbatch; do
    command -v "$cmd" >/dev/null 2>&1 || missing+=("$cmd")
done
if [ ${#missing[@]} -gt 0 ]; then
    if ! command -v apt-get >/dev/null 2>&1; then
        give_up "no apt-get to install ${DEBS[*]}; tests/test_slurm.py will skip"
    fi
    say "installing ${DEBS[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null 2>&1 || true
    # policy-rc.d-less containers would start the packaged daemons: we start our own.
    if ! RUNLEVEL=1 apt-get install -y -qq --no-install-recommends "${DEBS[@]}" \
            >"/tmp/perfgrid-slurm-apt.log" 2>&1; then
        give_up "apt-get install ${DEBS[*]} failed (/tmp/perfgrid-slurm-apt.log); tests will skip"
    fi
fi

mkdir -p "$STATE"/{ctld,spool,log,run}
: >"$STATE/started"
# The node is this host's name when it resolves to a loopback address (so the
# daemons bind there), else "localhost".
host=$(hostname -s)
case "$(getent ahostsv4 "$host" 2>/dev/null | awk 'NR == 1 {print $1}')" in
    127.*) ;;
    *) host=localhost ;;
esac
cpus=$(nproc)
mem_mb=$(free -m | awk '/^Mem:/ {print int($2 * 0.9)}')
cat >"$CONF" <<EOF
$MARK (removed by .ci/slurm-down.sh)
ClusterName=perfgrid
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
# Bind to the address the host name resolves to (127.0.0.1, see below), not to every address.
CommunicationParameters=NoInAddrAny,NoCtldInAddrAny
ReturnToService=2
# squeue keeps finished jobs this long: the executor plugin polls squeue (no slurmdbd here).
MinJobAge=3600
SlurmctldTimeout=30
SlurmdTimeout=60
NodeName=$host NodeAddr=127.0.0.1 NodeHostname=$host CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF

# munged: Unix socket only. Debian's postinst made the key; make one if not.
install -d -o munge -g munge -m 0755 /run/munge
install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge
[ -s /etc/munge/munge.key ] || { mungekey --create 2>/dev/null || \
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 2>/dev/null; }
chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key
install -d -o munge -g munge -m 0755 "$STATE/munge"
runuser -u munge -- munged --pid-file="$STATE/munge/munged.pid" \
    --log-file="$STATE/munge/munged.log" 2>"$STATE/log/munged.err" || true
for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    give_up "munged did not start ($STATE/log/munged.err); tests/test_slurm.py will skip"
fi

slurmctld -f "$CONF" -i || say "slurmctld failed to start (see $STATE/log/slurmctld.log)"
slurmd -f "$CONF" -N "$host" || say "slurmd failed to start (see $STATE/log/slurmd.log)"

# Ready when the node is idle.
for _ in $(seq 60); do
    state=$(sinfo -h -n "$host" -o %T 2>/dev/null | head -1)
    [ "$state" = idle ] && break
    sleep 1
done
if [ "${state:-}" != idle ]; then
    give_up "node $host is '${state:-not answering}', not idle after 60 s; logs in $STATE/log"
fi
say "SLURM up: node $host idle, $cpus CPUs, ${mem_mb} MB (state in $STATE)"
