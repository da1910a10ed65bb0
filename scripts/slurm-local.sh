#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for trying `ran-reproduce --launcher slurm` and for its
# tests (tests/system/test_slurm.py): slurmctld, slurmd and slurmdbd (the job accounting that sacct,
# and so submitit, reads jobs' states from) with a MariaDB server for it, from the distribution's
# packages (Debian: slurm-wlm, slurmdbd, munge, mariadb-server), run as root, on free ports, with
# their state, logs, a fresh database and a fresh munge key under one folder.
#
#   scripts/slurm-local.sh start   start it (nothing is done when it runs already); prints the
#                                  environment its commands need: eval "$(scripts/slurm-local.sh start)"
#   scripts/slurm-local.sh stop    cancel its jobs and stop its daemons (the folder is kept; start
#                                  uses it again)
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

daemons="munged mariadbd slurmdbd slurmctld slurmd"  # in the order they start

# the pid of daemon $1 where it runs (its pid file names a live process of that name), else none
pid_of() {
    local pid
    pid=$(cat "$DIR/$1.pid" 2>/dev/null) || return 1
    [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$1" ] && echo "$pid"
}

alive() { pid_of "$1" > /dev/null; }

print_env() { echo "export SLURM_CONF=$CONF"; }

running() {
    local name
    for name in $daemons; do alive "$name" || return 1; done
    SLURM_CONF=$CONF sinfo -h -o %T >/dev/null 2>&1
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# the jobs cancelled first (their processes would outlive slurmd), then each daemon in the reverse
# order, waited for (the database takes seconds to shut down, and a next start reuses its socket
# and its folder) and killed where it does not end
stop() {
    local name pid
    if alive slurmctld; then
        SLURM_CONF=$CONF scancel --partition=debug > /dev/null 2>&1 || true
        for _ in $(seq 30); do
            [ -z "$(SLURM_CONF=$CONF squeue -h -o %i 2>/dev/null)" ] && break
            sleep 1
        done
    fi
    for name in slurmd slurmctld slurmdbd mariadbd munged; do
        if pid=$(pid_of "$name"); then
            kill "$pid" 2>/dev/null || true
            for _ in $(seq 300); do alive "$name" || break; sleep 0.1; done
            if alive "$name"; then
                kill -KILL "$pid" 2>/dev/null || true
                for _ in $(seq 50); do alive "$name" || break; sleep 0.1; done
            fi
            if alive "$name"; then die "$name (pid $pid) does not end"; fi
        fi
        rm -f "$DIR/$name.pid"
    done
}

write_conf() {
    local ctld_port slurmd_port
    ctld_port=$(free_port)
    slurmd_port=$(free_port)
    while [ "$slurmd_port" = "$ctld_port" ]; do slurmd_port=$(free_port); done
    while [ "$dbd_port" = "$ctld_port" ] || [ "$dbd_port" = "$slurmd_port" ]; do
        dbd_port=$(free_port)
    done
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
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$dbd_port
AccountingStoragePass=$DIR/munge.socket
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
    # slurmdbd reads slurmdbd.conf beside slurm.conf, and only if its owner alone may read it
    install -m 600 /dev/stdin "$DIR/slurmdbd.conf" <<EOF
# written by scripts/slurm-local.sh: the accounting of the one-node cluster
AuthType=auth/munge
AuthInfo=socket=$DIR/munge.socket
DbdAddr=127.0.0.1
DbdHost=localhost
DbdPort=$dbd_port
SlurmUser=root
PidFile=$DIR/slurmdbd.pid
LogFile=$DIR/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$db_port
StorageUser=root
StorageLoc=slurm_acct_db
EOF
}

# a fresh database at each start, as slurmctld -c starts with no jobs (and may number them from 1
# again: the accounting would hold two jobs of one id)
start_database() {
    rm -rf "$DIR/db"
    mariadb-install-db --user=root --datadir="$DIR/db" --auth-root-authentication-method=normal \
        --skip-test-db > "$DIR/mariadb-install.log" 2>&1 \
        || die "mariadb-install-db failed: see $DIR/mariadb-install.log"
    setsid mariadbd --user=root --datadir="$DIR/db" --socket="$DIR/mariadb.socket" \
        --bind-address=127.0.0.1 --port="$db_port" --pid-file="$DIR/mariadbd.pid" \
        --log-error="$DIR/mariadbd.log" > /dev/null 2>&1 < /dev/null &
    for _ in $(seq 100); do
        mariadb-admin --socket="$DIR/mariadb.socket" ping > /dev/null 2>&1 && return 0
        sleep 0.3
    done
    die "the database is not up after 30 s: $(last_lines "$DIR/mariadbd.log")"
}

start_accounting() {
    SLURM_CONF=$CONF slurmdbd || die "slurmdbd did not start: $(last_lines "$DIR/slurmdbd.log")"
    for _ in $(seq 30); do
        SLURM_CONF=$CONF sacctmgr -i add cluster ranlocal > /dev/null 2>&1 && return 0
        alive slurmdbd || break
        sleep 1
    done
    die "slurmdbd does not answer: $(last_lines "$DIR/slurmdbd.log")"
}

# the last lines of log $1, and its path
last_lines() { echo "$(tail -n 3 "$1" 2>/dev/null | tr '\n' ' ')(see $1)"; }

start() {
    if running; then print_env; return 0; fi
    for cmd in slurmctld slurmd slurmdbd sacctmgr munged mungekey mariadbd mariadb-install-db \
               mariadb-admin sinfo python3; do
        command -v "$cmd" >/dev/null || die "$cmd not found: install the packages slurm-wlm," \
            "slurmdbd, munge and mariadb-server (Debian: apt-get install slurm-wlm slurmdbd munge" \
            "mariadb-server)"
    done
    [ "$(id -u)" = 0 ] || die "run it as root (its daemons run as root)"
    stop
    trap 'stop' EXIT  # a start that fails leaves no daemon behind
    mkdir -p "$DIR/state" "$DIR/spool"
    chmod 700 "$DIR"
    if [ ! -s "$DIR/munge.key" ]; then
        mungekey --create --keyfile="$DIR/munge.key" >/dev/null
    fi
    chmod 400 "$DIR/munge.key"
    munged --force --socket="$DIR/munge.socket" --key-file="$DIR/munge.key" \
        --pid-file="$DIR/munged.pid" --log-file="$DIR/munged.log" --seed-file="$DIR/munged.seed" \
        || die "munged did not start: $(last_lines "$DIR/munged.log")"
    db_port=$(free_port)
    dbd_port=$(free_port)
    while [ "$dbd_port" = "$db_port" ]; do dbd_port=$(free_port); done
    write_conf
    start_database
    start_accounting
    # -c: a clean start (no jobs from an earlier start); -i: ignore a stale state
    slurmctld -c -i -f "$CONF" || die "slurmctld did not start: $(last_lines "$DIR/slurmctld.log")"
    slurmd -f "$CONF" || die "slurmd did not start: $(last_lines "$DIR/slurmd.log")"
    for _ in $(seq 100); do
        state=$(SLURM_CONF=$CONF sinfo -h -o %T 2>/dev/null || true)
        case $state in idle*|mixed*|alloc*) trap - EXIT; print_env; return 0 ;; esac
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
