#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for trying `ran-reproduce --launcher slurm` and for its
# tests (tests/system/test_slurm.py): slurmctld and slurmd from the distribution's packages (Debian:
# slurm-wlm, munge), run as root, on free ports, with their state, logs and a fresh munge key
# under one folder.
#
#   scripts/slurm-local.sh start   start it (nothing is done when it runs already); prints the
#                                  environment its commands need: eval "$(scripts/slurm-local.sh start)"
#   scripts/slurm-local.sh stop    stop its daemons (the folder is kept; start uses it again)
#   scripts/slurm-local.sh env     print that environment if it runs (exit 1 otherwise)
#
# RAN_SLURM_DIR: the folder (default ${TMPDIR:-/tmp}/ran-slurm-local); RAN_SLURM_CPUS: the node's
# CPUs (default 2; more than the machine has lets jobs that mostly wait share its cores). The node
# is the whole machine: jobs run as root with no cgroup confinement
# (ProctrackType=proctrack/linuxproc, TaskPlugin=task/none), so use it for tests, not for sharing.
set -euo pipefail

DIR=${RAN_SLURM_DIR:-${TMPDIR:-/tmp}/ran-slurm-local}
CPUS=${RAN_SLURM_CPUS:-2}
CONF=$DIR/slurm.conf
NODE=$(hostname -s)

die() { echo "slurm-local.sh: $*" >&2; exit 1; }

alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

print_env() { echo "export SLURM_CONF=$CONF"; }

running() {
    alive "$DIR/munged.pid" && alive "$DIR/slurmctld.pid" && alive "$DIR/slurmd.pid" \
        && SLURM_CONF=$CONF sinfo -h -o %T >/dev/null 2>&1
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

stop() {
    local name
    for name in slurmd slurmctld munged; do
        if alive "$DIR/$name.pid"; then
            kill "$(cat "$DIR/$name.pid")" 2>/dev/null || true
            for _ in $(seq 50); do alive "$DIR/$name.pid" || break; sleep 0.1; done
        fi
        rm -f "$DIR/$name.pid"
    done
}

write_conf() {
    local ctld_port slurmd_port
    ctld_port=$(free_port)
    slurmd_port=$(free_port)
    while [ "$slurmd_port" = "$ctld_port" ]; do slurmd_port=$(free_port); done
    cat > "$CONF" <<EOF
# written by scripts/slurm-local.sh: a one-node cluster for tests
ClusterName=ranlocal
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$DIR/munge.socket
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
# the node has the CPUs named here, even more than the machine has (RAN_SLURM_CPUS)
SlurmdParameters=config_overrides
# a job at its time limit is signalled, then killed KillWait seconds later; a finished job's
# record stays MinJobAge seconds (scontrol show job)
KillWait=10
MinJobAge=600
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=5
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
}

start() {
    if running; then print_env; return 0; fi
    for cmd in slurmctld slurmd munged mungekey sinfo python3; do
        command -v "$cmd" >/dev/null || die "$cmd not found: install the packages slurm-wlm and munge (Debian: apt-get install slurm-wlm munge)"
    done
    [ "$(id -u)" = 0 ] || die "run it as root (its daemons run as root)"
    stop
    mkdir -p "$DIR/state" "$DIR/spool"
    chmod 700 "$DIR"
    if [ ! -s "$DIR/munge.key" ]; then
        mungekey --create --keyfile="$DIR/munge.key" >/dev/null
    fi
    chmod 400 "$DIR/munge.key"
    munged --force --socket="$DIR/munge.socket" --key-file="$DIR/munge.key" \
        --pid-file="$DIR/munged.pid" --log-file="$DIR/munged.log" --seed-file="$DIR/munged.seed" \
        || die "munged did not start: see $DIR/munged.log"
    write_conf
    # -c: a clean start (no jobs from an earlier start); -i: ignore a stale state
    slurmctld -c -i -f "$CONF" || die "slurmctld did not start: see $DIR/slurmctld.log"
    slurmd -f "$CONF" || die "slurmd did not start: see $DIR/slurmd.log"
    for _ in $(seq 100); do
        state=$(SLURM_CONF=$CONF sinfo -h -o %T 2>/dev/null || true)
        case $state in idle*|mixed*|alloc*) print_env; return 0 ;; esac
        sleep 0.3
    done
    die "the node is not up after 30 s (state: ${state:-none}); see $DIR/slurmctld.log and $DIR/slurmd.log"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    env) running || die "not running (scripts/slurm-local.sh start)"; print_env ;;
    *) die "usage: $0 start|stop|env" ;;
esac
