#!/usr/bin/env bash
# tests/slurm/e2e.sh - hpc-ledger against a real Slurm, end to end.
#
# Brings up a one-machine Slurm 22.05 from Debian's packages (munge, slurmdbd on
# MariaDB, slurmctld, two slurmd nodes c01/c02 with fake GPUs), points
# jobcomp/elasticsearch at `hpc-ledger serve`, runs real jobs, and checks that
# every job is charged once, as the rules of docs/rules.md say (computed independently by
# check.py from sacct and tests/slurm/center.toml), that `sacct` imported into
# a second ledger charges the same, that re-importing it into the first records
# nothing new, and that restarting serve while Slurm posts loses nothing; then
# (slurmctld restarted with jobcomp/filetxt) that the lines Slurm writes to its
# filetxt log charge what sacct says of the same jobs.
# Tears everything down on exit. See tests/slurm/README.md.
#
#   sudo tests/slurm/e2e.sh        (from anywhere; root: it installs packages and starts daemons)
#
# Environment: HPC_LEDGER_BIN (default target/release/hpc-ledger, built if
# missing), SLURM_E2E_DIR (default target/slurm-e2e), SLURM_E2E_BURST (jobs in
# the restart burst, default 16), SLURM_E2E_KEEP=1 (keep the accounting
# database and ledgers after the run; daemons are stopped anyway),
# SLURM_E2E_SERVE_FLAGS (more options for `serve`, e.g. --intake).
# Exit: 0 passed or SKIPPED (packages cannot be installed), 1 failed.
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
abs() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }   # paths given relative to the caller's directory
[ -z "${HPC_LEDGER_BIN:-}" ] || HPC_LEDGER_BIN=$(abs "$HPC_LEDGER_BIN")
[ -z "${SLURM_E2E_DIR:-}" ] || SLURM_E2E_DIR=$(abs "$SLURM_E2E_DIR")
cd "$ROOT" || exit 1
T0=$(date +%s)
export TZ=UTC LC_ALL=C   # Slurm's local times are UTC for daemons and sacct alike (center.toml says UTC)
unset DATABASE_URL HPC_LEDGER_DATABASE_URL_FILE

CLUSTER=ledgere2e
CONFIG=$HERE/center.toml
BURST=${SLURM_E2E_BURST:-16}
ACCT_DB=hl_e2e_slurm_acct
ACCT_USER=hl_e2e
PY=/usr/bin/python3
SACCT_FORMAT=jobid,jobidraw,cluster,partition,qos,account,group,gid,user,uid,submit,eligible,start,end,elapsed,exitcode,state,nnodes,ncpus,reqcpus,reqmem,reqtres,alloctres,timelimit,nodelist,jobname

ts() { printf '[%4ds] %s\n' "$(($(date +%s) - T0))" "$*"; }
FAILS=()
fail() { FAILS+=("$*"); ts "MISMATCH: $*"; }
die() { FAILS+=("$*"); ts "ERROR: $*"; exit 1; }
skip() { echo "SKIPPED: $*"; exit 0; }
alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }
pidfile() { [ -s "$1" ] && cat "$1"; }
waitfor() { # waitfor SECONDS DESCRIPTION CMD... (polls every 0.5 s)
    local n=$1 what=$2 i
    shift 2
    for ((i = 0; i < n * 2; i++)); do "$@" >/dev/null 2>&1 && return 0; sleep 0.5; done
    die "timeout after ${n}s waiting for $what"
}
stop_pid() { # stop_pid PID NAME: TERM, then KILL after 30 s
    local p=$1 i
    alive "$p" || return 0
    kill "$p" 2>/dev/null
    for ((i = 0; i < 60; i++)); do alive "$p" || return 0; sleep 0.5; done
    echo "$2 (pid $p) still alive after 30 s: KILL" >&2
    kill -9 "$p" 2>/dev/null
}

# ------------------------------------------------------------------ needs
[ "$(id -u)" = 0 ] || skip "needs root (installs Debian's Slurm packages and starts munge/Slurm daemons)"
if ! command -v apt-get >/dev/null || ! command -v dpkg-query >/dev/null; then
    skip "not a Debian/Ubuntu machine (no apt-get)"
fi

PKGS="munge slurmctld slurmd slurm-client slurmdbd slurm-wlm-elasticsearch-plugin"
[ -x "$PY" ] || PKGS="$PKGS python3"
command -v curl >/dev/null || PKGS="$PKGS curl"
command -v psql >/dev/null || PKGS="$PKGS postgresql-client"
if ! mysqladmin ping >/dev/null 2>&1; then    # no MariaDB running: ours, started below
    [ -x /usr/sbin/mariadbd ] || PKGS="$PKGS mariadb-server"
    command -v mysql >/dev/null || PKGS="$PKGS mariadb-client"
fi
missing=()
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    ts "installing: ${missing[*]}"
    apt_opts=(-o Acquire::Retries=0 -o Acquire::http::Timeout=20 -qq)
    [ -n "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -mmin -1440 2>/dev/null | head -1)" ] \
        || apt-get "${apt_opts[@]}" update >/dev/null 2>&1
    # No systemd here: a policy-rc.d that exits 101 (as in Debian containers) keeps
    # postinst from starting services; without one, we stop what it started below.
    if ! DEBIAN_FRONTEND=noninteractive apt-get "${apt_opts[@]}" install -y --no-install-recommends "${missing[@]}" \
        > /tmp/slurm-e2e-apt.log 2>&1; then
        tail -n 5 /tmp/slurm-e2e-apt.log
        skip "could not install ${missing[*]} (no network or no Debian package archive?)"
    fi
    ts "installed (slurm $(dpkg-query -W -f='${Version}' slurmctld))"
fi
"$PY" -c 'import tomllib' 2>/dev/null || die "$PY has no tomllib (needs Python >= 3.11)"

# ------------------------------------------------------------------ hpc-ledger
BIN=${HPC_LEDGER_BIN:-$ROOT/target/release/hpc-ledger}
if [ ! -x "$BIN" ]; then
    [ -z "${HPC_LEDGER_BIN:-}" ] || die "HPC_LEDGER_BIN=$BIN is not an executable"
    ts "building $BIN (cargo build --release)"
    cargo build --release --bin hpc-ledger >/dev/null || die "cargo build --release failed"
fi
"$BIN" serve --help >/dev/null 2>&1 || die "$BIN has no \`serve\` command"
ledger() { HPC_LEDGER_HOME="$1" "$BIN" "${@:2}"; }

# ------------------------------------------------------------------ where
E2E=${SLURM_E2E_DIR:-$ROOT/target/slurm-e2e}
mkdir -p "$E2E" && E2E=$(cd "$E2E" && pwd)
# slurmctld and slurmdbd run as the user slurm: it must be able to reach the directory
# (a checkout in a mode-700 home directory is not).
if ! runuser -u slurm -- test -x "$E2E"; then
    [ -n "${SLURM_E2E_DIR:-}" ] && die "the user slurm cannot reach SLURM_E2E_DIR=$E2E"
    E2E=/srv/hpc-ledger-slurm-e2e
    ts "the user slurm cannot reach $ROOT/target: using $E2E"
    mkdir -p "$E2E"
fi
ETC=$E2E/etc VAR=$E2E/var OUT=$E2E/out JOBS=$E2E/jobs
L1=$E2E/ledger-serve   # ledger fed by serve (HPC_LEDGER_HOME)
L2=$E2E/ledger-import  # a second, fresh ledger fed by `import` of sacct's output
export SLURM_CONF=$ETC/slurm.conf

# ------------------------------------------------------------------ teardown
SERVE_PID=""
MUNGE_OURS="" MARIADB_OURS=""
drop_acct_db() {
    mysql -uroot -e "DROP DATABASE IF EXISTS $ACCT_DB; DROP USER IF EXISTS '$ACCT_USER'@'localhost';" 2>/dev/null || true
}
forget_ledger() { # stop a ledger's embedded PostgreSQL and delete it (also its files kept elsewhere)
    [ -d "$1" ] || return 0
    ledger "$1" db stop >/dev/null 2>&1 || true
    if [ -f "$1/cluster-location" ]; then
        local elsewhere
        elsewhere=$(tail -n 1 "$1/cluster-location")
        case $elsewhere in /var/lib/hpc-ledger/clusters/*) rm -rf "$elsewhere" ;; esac
    fi
    rm -rf "$1"
}
stop_slurm() {
    local f
    for f in "$VAR"/run/slurmd-*.pid; do [ -e "$f" ] && stop_pid "$(pidfile "$f")" "slurmd ${f##*/}"; done
    stop_pid "$(pidfile "$VAR/run/slurmctld.pid")" slurmctld
    stop_pid "$(pidfile "$VAR/run/slurmdbd.pid")" slurmdbd
}
teardown() {
    local rc=$?
    trap - EXIT INT TERM
    set +e
    stop_pid "$SERVE_PID" "hpc-ledger serve"
    stop_slurm
    [ -n "$MUNGE_OURS" ] && stop_pid "$MUNGE_OURS" munged
    ledger "$L1" db stop >/dev/null 2>&1
    ledger "$L2" db stop >/dev/null 2>&1
    if [ "${SLURM_E2E_KEEP:-0}" != 1 ]; then
        drop_acct_db
        forget_ledger "$L1"
        forget_ledger "$L2"
    fi
    [ -n "$MARIADB_OURS" ] && stop_pid "$MARIADB_OURS" mariadbd
    local secs=$(($(date +%s) - T0))
    echo
    echo "== real Slurm end to end: summary"
    printf '%s\n' "${SUMMARY[@]}"
    echo "seconds taken:      $secs"
    echo "state and logs:     $E2E (out/, var/log/)"
    if [ ${#FAILS[@]} -gt 0 ] || [ "$rc" != 0 ]; then
        echo "FAILED:"
        printf '  - %s\n' "${FAILS[@]:-exit status $rc}"
        exit 1
    fi
    echo "PASSED"
    exit 0
}
SUMMARY=()
trap teardown EXIT
trap 'die "interrupted"' INT TERM

# a previous run's leftovers (killed before its teardown)
if [ -d "$VAR/run" ]; then
    stop_pid "$(pidfile "$VAR/run/serve.pid")" "hpc-ledger serve (previous run)"
    stop_slurm
fi
forget_ledger "$L1"
forget_ledger "$L2"
drop_acct_db
rm -rf "$ETC" "$VAR" "$OUT" "$JOBS" "${E2E:?}/dev"
mkdir -p "$ETC" "$OUT" "$JOBS" "$E2E/dev" "$VAR"/{spool/slurmctld,spool/slurmd-c01,spool/slurmd-c02,log,run}
chown slurm:slurm "$VAR/spool/slurmctld" "$VAR/log" "$VAR/run"
chmod 1777 "$JOBS"

# ------------------------------------------------------------------ munge, MariaDB
if ! (munge -n | unmunge) >/dev/null 2>&1; then
    if [ ! -s /etc/munge/munge.key ]; then
        mungekey --create --keyfile=/etc/munge/munge.key && chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
    fi
    mkdir -p /run/munge /var/log/munge && chown munge:munge /run/munge /var/log/munge
    start-stop-daemon --start --oknodo --chuid munge --exec /usr/sbin/munged >/dev/null
    waitfor 20 munged sh -c 'munge -n | unmunge'
    MUNGE_OURS=$(pidfile /run/munge/munged.pid)
    ts "munged started"
fi
if ! mysqladmin ping >/dev/null 2>&1; then
    mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld
    [ -d /var/lib/mysql/mysql ] || mariadb-install-db --user=mysql --datadir=/var/lib/mysql >/dev/null
    start-stop-daemon --start --oknodo --background --pidfile /run/mysqld/mysqld.pid \
        --exec /usr/sbin/mariadbd -- --user=mysql --pid-file=/run/mysqld/mysqld.pid \
        --log-error="$VAR/log/mariadb.err" --innodb-lock-wait-timeout=900
    waitfor 60 mariadb mysqladmin ping
    MARIADB_OURS=$(pidfile /run/mysqld/mysqld.pid)
    ts "mariadb started"
fi
ACCT_PASS=$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
mysql -uroot -e "CREATE USER '$ACCT_USER'@'localhost' IDENTIFIED BY '$ACCT_PASS';
                 GRANT ALL ON $ACCT_DB.* TO '$ACCT_USER'@'localhost';" || die "cannot create the MariaDB user $ACCT_USER"

# ------------------------------------------------------------------ configs
read -r P_CTLD P_DBD P_C01 P_C02 P_SERVE < <("$PY" -c '
import socket
ss = [socket.socket() for _ in range(5)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in ss))')
SERVE_PASS=$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
BASIC="slurm:$SERVE_PASS"
(umask 077 && printf '%s\n' "$BASIC" > "$ETC/serve-basic")
SERVE_URL=http://127.0.0.1:$P_SERVE
HOST=$(hostname -s)
for n in c01 c02; do
    for g in 0 1; do  # fake GPUs: char devices with /dev/null's numbers (gres.conf needs File=)
        mknod -m 666 "$E2E/dev/$n-gpu$g" c 1 3 2>/dev/null || touch "$E2E/dev/$n-gpu$g"
    done
done
# Nodes are declared, not detected: 2 cores and 16 GiB each whatever the machine
# (config_overrides), so charges do not depend on the host; jobs only sleep.
NODE="CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=16384 Gres=gpu:v100:2"
cat > "$ETC/slurm.conf" <<EOF
# generated by tests/slurm/e2e.sh
ClusterName=$CLUSTER
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=slurm
SlurmctldPort=$P_CTLD
SlurmdPort=$P_C01
AuthType=auth/munge
CryptoType=crypto/munge
StateSaveLocation=$VAR/spool/slurmctld
SlurmdSpoolDir=$VAR/spool/slurmd-%n
SlurmctldPidFile=$VAR/run/slurmctld.pid
SlurmdPidFile=$VAR/run/slurmd-%n.pid
SlurmctldLogFile=$VAR/log/slurmctld.log
SlurmdLogFile=$VAR/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
SlurmdParameters=config_overrides
MpiDefault=none
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=512
KillWait=5
MinJobAge=300
InactiveLimit=0
Waittime=0
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$P_DBD
AccountingStorageEnforce=associations,limits,qos
AccountingStorageTRES=gres/gpu,gres/gpu:v100
JobCompType=jobcomp/elasticsearch
JobCompLoc=http://$BASIC@127.0.0.1:$P_SERVE/slurm/_doc
GresTypes=gpu
NodeName=c01 NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$P_C01 $NODE State=UNKNOWN
NodeName=c02 NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$P_C02 $NODE State=UNKNOWN
PartitionName=regular Nodes=c01,c02 Default=YES MaxTime=1:00:00 State=UP
PartitionName=hugemem Nodes=c01,c02 Default=NO MaxTime=1:00:00 State=UP
PartitionName=gpu Nodes=c01,c02 Default=NO MaxTime=1:00:00 State=UP
EOF
chmod 600 "$ETC/slurm.conf"   # it holds serve's password (JobCompLoc); only root runs clients here
chown slurm:slurm "$ETC/slurm.conf"
cat > "$ETC/gres.conf" <<EOF
AutoDetect=off
NodeName=c01 Name=gpu Type=v100 File=$E2E/dev/c01-gpu[0-1]
NodeName=c02 Name=gpu Type=v100 File=$E2E/dev/c02-gpu[0-1]
EOF
(umask 077 && cat > "$ETC/slurmdbd.conf" <<EOF
AuthType=auth/munge
DbdHost=localhost
DbdPort=$P_DBD
SlurmUser=slurm
DebugLevel=info
LogFile=$VAR/log/slurmdbd.log
PidFile=$VAR/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=$ACCT_USER
StoragePass=$ACCT_PASS
StorageLoc=$ACCT_DB
EOF
)
chown slurm:slurm "$ETC/slurmdbd.conf"

# ------------------------------------------------------------------ the ledger and serve
ledger "$L1" config apply "$CONFIG" > "$OUT/config-apply.log" 2>&1 || die "config apply failed: $(tail -n 3 "$OUT/config-apply.log")"
ledger "$L2" config apply "$CONFIG" >> "$OUT/config-apply.log" 2>&1 || die "config apply (second ledger) failed"
URL1=$(ledger "$L1" db url) || die "hpc-ledger db url failed"
URL2=$(ledger "$L2" db url) || die "hpc-ledger db url failed"
sql() { psql "$1" -X -q -A -t -F $'\t' -v ON_ERROR_STOP=1 -c "$2"; }
healthy() { [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$SERVE_URL/healthz")" = 200 ]; }
SERVE_STARTS=0
start_serve() {
    SERVE_STARTS=$((SERVE_STARTS + 1))
    echo "---- start $SERVE_STARTS $(date -u +%FT%TZ)" >> "$OUT/serve.log"
    HPC_LEDGER_HOME=$L1 HPC_LEDGER_SERVE_BASIC_FILE=$ETC/serve-basic \
        "$BIN" serve --listen "127.0.0.1:$P_SERVE" ${SLURM_E2E_SERVE_FLAGS:-} >> "$OUT/serve.log" 2>&1 &
    SERVE_PID=$!
    echo "$SERVE_PID" > "$VAR/run/serve.pid"
    waitfor 30 "hpc-ledger serve on :$P_SERVE to answer /healthz (out/serve.log)" healthy
}
stop_serve() { # SIGTERM; sets SERVE_RC and SERVE_STOP_SECS
    local t=$SECONDS i
    kill -TERM "$SERVE_PID"
    for ((i = 0; i < 60; i++)); do alive "$SERVE_PID" || break; sleep 0.5; done
    if alive "$SERVE_PID"; then
        fail "serve did not exit within 30 s of SIGTERM; killed"
        kill -9 "$SERVE_PID"
    fi
    SERVE_RC=0
    wait "$SERVE_PID" || SERVE_RC=$?
    SERVE_STOP_SECS=$((SECONDS - t))
    SERVE_PID=""
}
start_serve
ts "hpc-ledger serve up on :$P_SERVE (ledger $L1)"
# credentials are required: Slurm's are accepted (below), none or wrong ones are not
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' -d '{}' "$SERVE_URL/slurm/_doc")
[ "$code" = 401 ] || fail "POST /slurm/_doc without credentials answered $code, expected 401"
code=$(curl -s -o /dev/null -w '%{http_code}' -u "slurm:wrong" -X POST -H 'Content-Type: application/json' -d '{}' "$SERVE_URL/slurm/_doc")
[ "$code" = 401 ] || fail "POST /slurm/_doc with a wrong password answered $code, expected 401"

# ------------------------------------------------------------------ Slurm up
slurmdbd || die "slurmdbd did not start: $(tail -n 3 "$VAR/log/slurmdbd.log")"
waitfor 60 slurmdbd sacctmgr -n list cluster
sacctmgr -i add cluster "$CLUSTER" >/dev/null || die "sacctmgr add cluster failed"
slurmctld || die "slurmctld did not start: $(tail -n 3 "$VAR/log/slurmctld.log")"
CTLD_STARTED=$(date +%s)
waitfor 60 slurmctld scontrol ping
for n in c01 c02; do
    slurmd -N "$n" || die "slurmd $n did not start: $(tail -n 3 "$VAR/log/slurmd-$n.log")"
done
waitfor 30 "slurmd pid files" test -s "$VAR/run/slurmd-c01.pid" -a -s "$VAR/run/slurmd-c02.pid"
nodes_idle() { [ "$(sinfo -h -N -o '%N %T' | awk '$2 == "idle"' | sort -u | wc -l)" = 2 ]; }
waitfor 60 "nodes c01, c02 idle" nodes_idle
sacctmgr -i add account e2e0001,e2e0002 Description=hpc-ledger-e2e Organization=e2e >/dev/null || die "sacctmgr: cannot add accounts"
sacctmgr -i add user root Account=e2e0001,e2e0002 >/dev/null || die "sacctmgr: cannot add root to the accounts"
ts "slurm up: cluster $CLUSTER, $(sinfo -h -N -o '%N=%T' | sort -u | tr '\n' ' ')"

# ------------------------------------------------------------------ jobs
sb() { sbatch --parsable -D "$JOBS" -o "$JOBS/%x-%j.out" "$@"; }
IDS=()
submit() { # submit NAME SBATCH-ARGS...
    local id
    id=$(sb -J "$1" "${@:2}") || die "sbatch $1 failed"
    id=${id%%;*}
    IDS+=("$id")
    eval "ID_${1//-/_}=$id"
}
submit single        -A E2E0001 -p regular -N 1 -n 1 --mem=256M  -t 2 --wrap 'sleep 3'
submit multicore     -A E2E0001 -p regular -N 1 -n 2 --mem=1G    -t 2 --wrap 'srun sleep 3'
submit membound      -A E2E0002 -p regular -N 1 -n 1 --mem=2560M -t 2 --wrap 'sleep 3'
submit hugemem       -A E2E0002 -p hugemem -N 1 -c 2 --mem=6G    -t 2 --wrap 'sleep 3'
submit gpu           -A E2E0001 -p gpu     -N 1 -n 1 --gres=gpu:2 --mem=1G -t 2 --wrap 'sleep 3'
submit multinode     -A E2E0001 -p regular -N 2 --ntasks-per-node=1 --mem=300M -t 2 --wrap 'srun sleep 3'
submit array         -A E2E0002 -p regular -N 1 -n 1 --mem-per-cpu=256M --array=0-2 -t 2 --wrap 'sleep 2'
submit fails         -A E2E0001 -p regular -N 1 -n 1 --mem=128M  -t 2 --wrap 'sleep 2; exit 3'
submit cancel-running -A E2E0002 -p regular -N 1 -n 1 --mem=128M -t 5 --wrap 'sleep 120'
submit cancel-pending -A E2E0002 -p regular -N 1 -n 1 --mem=128M -t 5 --begin=now+3600 --wrap 'sleep 2'
submit requeue       -A E2E0001 -p gpu     -N 1 -n 1 --gres=gpu:1 --mem=128M -t 3 --requeue --wrap 'sleep 12'
# shellcheck disable=SC2154 # set by submit
{
    scancel "$ID_cancel_pending"
    ts "submitted ${#IDS[@]} jobs (ids ${IDS[*]}; the array is 3 tasks); cancelled $ID_cancel_pending while pending"
    running() { [ "$(squeue -h -j "$ID_cancel_running" -o %T)" = RUNNING ]; }
    waitfor 120 "job $ID_cancel_running running" running
    sleep 2
    scancel "$ID_cancel_running"
    ts "cancelled $ID_cancel_running while running"
    # A requeue while running: Slurm posts the run that ended as "PENDING"
    # (docs/slurm.md); it must be charged, and the job's next run too.
    requeue_running() { [ "$(squeue -h -j "$ID_requeue" -o %T)" = RUNNING ]; }
    waitfor 120 "job $ID_requeue running" requeue_running
    sleep 3
    scontrol requeue "$ID_requeue" || die "scontrol requeue $ID_requeue failed"
    requeue_pending() { [ "$(squeue -h -j "$ID_requeue" -o %T)" = PENDING ]; }
    waitfor 30 "job $ID_requeue pending again" requeue_pending
    # Slurm holds a requeued job back for about two minutes (BeginTime) before
    # its next run. (Moving its StartTime to now made Slurm 22.05 record a
    # bogus zero-second FAILED "allocation" run with no partition: don't.)
    ts "requeued $ID_requeue while running (its next run starts in about two minutes)"
}
queue_empty() { [ -z "$(squeue -h -o %i)" ]; }
waitfor 300 "the queue to empty" queue_empty
ts "all jobs ended"

ledger_jobs() { sql "$URL1" "SELECT count(*) FROM job j JOIN cluster c ON c.id = j.cluster_id WHERE lower(c.name) = '$CLUSTER'"; }
sacct_settled() { # slurmdbd has every job's end (it lags squeue by a moment)
    sacct --parsable2 --noheader --allocations --duplicates -j "$(IFS=,; echo "${IDS[*]}")" --format "$SACCT_FORMAT" \
        > "$OUT/sacct.tmp" || return 1
    # (a REQUEUED line is a run that ended; the job's current run is another line)
    [ "$(wc -l < "$OUT/sacct.tmp")" -ge "${#IDS[@]}" ] && ! awk -F'|' '$14 == "Unknown" || $17 ~ /^(PENDING|RUNNING|COMPLETING|SUSPENDED)/ {bad = 1} END {exit !bad}' "$OUT/sacct.tmp"
}
dump_sacct() { # the accounting of every job submitted, allocations only, with the header import reads
    waitfor 60 "slurmdbd to record the end of every job" sacct_settled
    sacct --parsable2 --allocations --duplicates -j "$(IFS=,; echo "${IDS[*]}")" --format "$SACCT_FORMAT" > "$OUT/sacct.txt" \
        || die "sacct failed"
    rm -f "$OUT/sacct.tmp"
    read -r STARTED NEVER_STARTED EXPECTED_TOTAL < <("$PY" "$HERE/check.py" total "$CONFIG" "$OUT/sacct.txt")
    [ -n "$EXPECTED_TOTAL" ] || die "check.py could not read sacct's output (out/sacct.txt)"
}
wait_delivered() { # wait_delivered SECONDS: until the ledger holds as many jobs as sacct says started
    local n=$1 i have=0
    dump_sacct
    for ((i = 0; i < n; i += 2)); do
        have=$(ledger_jobs) || have=0
        [ "$have" -ge "$STARTED" ] && return 0
        sleep 2
    done
    fail "after ${n}s the ledger holds $have jobs of the $STARTED that started"
    return 1
}
if wait_delivered 150; then
    first=$(sql "$URL1" "SELECT extract(epoch FROM min(recorded_at))::bigint FROM job_record")
    ts "serve recorded all $STARTED jobs that started (the first $((first - CTLD_STARTED))s after slurmctld started)"
fi

# ------------------------------------------------------------------ restart serve while Slurm posts
BURST_IDS=()
for ((b = 0; b < BURST; b++)); do
    id=$(sb -J "burst-$b" -A "E2E000$((b % 2 + 1))" -p regular -N 1 -n 1 --mem=64M -t 2 --wrap 'sleep 1') || die "sbatch burst failed"
    BURST_IDS+=("$id"); IDS+=("$id")
done
before=$(ledger_jobs)
ts "submitted a burst of $BURST jobs (ids ${BURST_IDS[0]}-${BURST_IDS[-1]}); restarting serve once some are posted"
some_posted() { [ "$(ledger_jobs)" -ge $((before + 3)) ]; }
waitfor 60 "the first burst jobs in the ledger" some_posted
burst_queued() { squeue -h -j "$(IFS=,; echo "${BURST_IDS[*]}")" -o %i | wc -l; }
curl -s -u "$BASIC" "$SERVE_URL/metrics" > "$OUT/metrics-1.txt"
T_DOWN=$(date +%s)
stop_serve
queued_at_stop=$(burst_queued)
[ "$SERVE_RC" = 0 ] || fail "serve exited $SERVE_RC on SIGTERM, expected 0"
ts "serve stopped by SIGTERM (exit $SERVE_RC after ${SERVE_STOP_SECS}s); $(($(ledger_jobs) - before)) of $BURST burst jobs recorded, $queued_at_stop not ended yet"
sleep 6
ended_while_down=$((queued_at_stop - $(burst_queued)))
start_serve
T_UP=$(date +%s)
ts "serve started again; $ended_while_down burst jobs ended while it was down"
waitfor 120 "the queue to empty" queue_empty
T_RESTART=$(date +%s)
wait_delivered 240 && ts "after the restart serve recorded every job: $STARTED in all ($(( $(date +%s) - T_RESTART ))s after the burst ended)"
sleep 3   # anything Slurm still re-sends would show up now
# the jobs that ended while serve was down came in by Slurm's retries
read -r retried longest < <(sql "$URL1" "SELECT count(*) FILTER (WHERE r.ended_at < to_timestamp($T_UP) AND r.recorded_at > to_timestamp($T_UP)),
       ceil(extract(epoch FROM max(r.recorded_at - r.ended_at)))::bigint
  FROM job_record r WHERE r.kind = 'original' AND r.recorded_at > to_timestamp($T_DOWN)")
[ "$retried" -gt 0 ] || fail "no job ended while serve was down: the restart tested nothing (SLURM_E2E_BURST=$BURST)"

# ------------------------------------------------------------------ checks
LEDGER_SQL="SELECT j.scheduler_job_id, coalesce(j.array_index::text, ''),
       to_char(j.started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS'), j.id, r.id, r.kind,
       r.source_format, p.code, coalesce(le.id::text, ''), coalesce(le.kind, ''), coalesce(le.metric, ''),
       coalesce(le.quantity::text, ''), coalesce(le.unit_rate::text, ''), coalesce(le.amount::text, '')
  FROM job j JOIN cluster c ON c.id = j.cluster_id
  JOIN job_record r ON r.job_id = j.id
  JOIN project p ON p.id = r.project_id
  LEFT JOIN ledger_entry le ON le.job_record_id = r.id
 WHERE lower(c.name) = '$CLUSTER'
 ORDER BY j.id, r.id, le.id"
check() { "$PY" "$HERE/check.py" "$@" | tee -a "$OUT/mismatches.txt" | sed 's/^MISMATCH //' | while IFS= read -r m; do echo "  $m"; done; return "${PIPESTATUS[0]}"; }
sql "$URL1" "$LEDGER_SQL" > "$OUT/ledger-serve.tsv" || die "cannot read the ledger"
check verify "$CONFIG" "$OUT/sacct.txt" "$OUT/ledger-serve.tsv" serve --source jobcomp --one-record \
    || fail "the ledger fed by serve differs from the charges computed from sacct (out/mismatches.txt)"

other=$(sql "$URL1" "SELECT count(*) FROM ledger_entry WHERE kind <> 'job' OR job_record_id IS NULL")
[ "$other" = 0 ] || fail "the ledger fed by serve holds $other entries that are not job charges"
disc=$(sql "$URL1" "SELECT count(*) FROM audit.discrepancies")
[ "$disc" = 0 ] || { sql "$URL1" "SELECT * FROM audit.discrepancies LIMIT 20" > "$OUT/discrepancies.txt"; fail "audit.discrepancies has $disc rows (out/discrepancies.txt)"; }
ledger "$L1" audit > "$OUT/audit.txt" 2>&1 || fail "hpc-ledger audit exited $? (out/audit.txt)"
# every record Slurm posted, read again from its kept document
ledger "$L1" audit --deep > "$OUT/audit-deep.txt" 2>&1 || fail "hpc-ledger audit --deep exited $? (out/audit-deep.txt)"
rejected=$(sql "$URL1" "SELECT count(*) FROM rejected_record")
[ "$rejected" = 0 ] || fail "serve kept $rejected rejected records (hpc-ledger rejected)"
# serve's counters, both runs of it: nothing rejected or malformed, and no reply
# but 200/201 to Slurm (it retries anything else forever), 401 only for the probes
curl -s -u "$BASIC" "$SERVE_URL/metrics" > "$OUT/metrics-2.txt"
metric() { # metric NAME LABEL: the sum over both serve runs
    awk -v n="$1{$2}" '$1 == n {s += $2} END {print s + 0}' "$OUT/metrics-1.txt" "$OUT/metrics-2.txt"
}
for o in rejected malformed; do
    n=$(metric hpc_ledger_serve_jobs_total "outcome=\"$o\"")
    [ "$n" = 0 ] || fail "serve's /metrics counts $n $o documents"
done
statuses=$(awk -F'[{}" ]+' '/^hpc_ledger_serve_requests_total\{/ {s[$3] += $4} END {for (k in s) if (s[k] > 0) printf "%s:%s ", k, s[k]}' \
    "$OUT/metrics-1.txt" "$OUT/metrics-2.txt")
n401=$(metric hpc_ledger_serve_requests_total 'status="401"')
[ "$n401" = 2 ] || fail "serve answered 401 $n401 times, expected 2 (the test's own probes): did Slurm's credentials fail?"
other=$(awk -F'[{}" ]+' '/^hpc_ledger_serve_requests_total\{/ && $3 !~ /^(200|201|401)$/ && $4 > 0 {printf "%s:%s ", $3, $4}' \
    "$OUT/metrics-1.txt" "$OUT/metrics-2.txt")
[ -z "$other" ] || fail "serve answered Slurm with statuses other than 200/201 (Slurm retries them): $other"
outcomes=$(awk -F'[{}" ]+' '/^hpc_ledger_serve_jobs_total\{/ && $4 > 0 {s[$3] += $4} END {for (k in s) printf "%s %s, ", s[k], k}' \
    "$OUT/metrics-1.txt" "$OUT/metrics-2.txt")

# two paths, one answer: sacct imported into a second, fresh ledger
ledger "$L2" import --format slurm --output json "$OUT/sacct.txt" > "$OUT/import-fresh.json" 2>"$OUT/import-fresh.err"
rc=$?
[ $rc = 0 ] || fail "import of sacct's output into a fresh ledger exited $rc (out/import-fresh.json)"
sql "$URL2" "$LEDGER_SQL" > "$OUT/ledger-import.tsv" || die "cannot read the second ledger"
check verify "$CONFIG" "$OUT/sacct.txt" "$OUT/ledger-import.tsv" import --source slurm --one-record \
    || fail "the ledger fed by import differs from the charges computed from sacct"
check same "$OUT/ledger-serve.tsv" "$OUT/ledger-import.tsv" serve import \
    || fail "serve and import charged some jobs differently"
disc2=$(sql "$URL2" "SELECT count(*) FROM audit.discrepancies")
[ "$disc2" = 0 ] || fail "audit.discrepancies of the imported ledger has $disc2 rows"
ledger "$L2" audit --deep > "$OUT/audit-deep-import.txt" 2>&1 \
    || fail "hpc-ledger audit --deep of the imported ledger exited $? (out/audit-deep-import.txt)"

# the same sacct output into the first ledger records nothing new
ledger "$L1" import --format slurm --output json "$OUT/sacct.txt" > "$OUT/import-again.json" 2>"$OUT/import-again.err"
rc=$?
[ $rc = 0 ] || fail "import of sacct's output into serve's ledger exited $rc (out/import-again.json)"
read -r again_recorded again_superseded again_replayed again_revised < <("$PY" -c '
import json, sys
s = json.load(open(sys.argv[1]))
print(s.get("recorded"), s.get("superseded"), s.get("replayed"), s.get("revised"))' "$OUT/import-again.json" 2>/dev/null || echo "? ? ? ?")
[ "$again_recorded/$again_superseded" = 0/0 ] ||
    fail "importing sacct's output into serve's ledger recorded $again_recorded and superseded $again_superseded jobs, expected none"
sql "$URL1" "$LEDGER_SQL" > "$OUT/ledger-serve-after-import.tsv"
[ "$("$PY" "$HERE/check.py" entries "$OUT/ledger-serve.tsv")" = "$("$PY" "$HERE/check.py" entries "$OUT/ledger-serve-after-import.tsv")" ] \
    || fail "importing sacct's output into serve's ledger changed its ledger entries"
check verify "$CONFIG" "$OUT/sacct.txt" "$OUT/ledger-serve-after-import.tsv" serve+import --source jobcomp \
    || fail "serve's ledger after the import differs from the charges computed from sacct"
[ "$(sql "$URL1" "SELECT count(*) FROM audit.discrepancies")" = 0 ] || fail "audit.discrepancies not empty after the re-import"

# statements: what the billing office would send
for m in $(sql "$URL1" "SELECT DISTINCT to_char(period, 'YYYY-MM') FROM ledger_entry"); do
    ledger "$L1" statement --all --month "$m" --out "$OUT/statements-$m" > "$OUT/statements-$m.log" 2>&1 ||
        fail "hpc-ledger statement --all --month $m failed: $(tail -n 1 "$OUT/statements-$m.log")"
done
stated=$(cat "$OUT"/statements-*/*.txt 2>/dev/null | awk '$1 == "TOTAL" {s += $3} END {printf "%.2f", s}')
[ "$stated" = "$EXPECTED_TOTAL" ] || fail "the statements total $stated, the rules give $EXPECTED_TOTAL"
charged=$(sql "$URL1" "SELECT coalesce(sum(amount), 0) FROM ledger_entry")
[ "$charged" = "$EXPECTED_TOTAL" ] || fail "the ledger's total is $charged, the rules give $EXPECTED_TOTAL"

requeued=$(sql "$URL1" "SELECT count(*) FROM job_record WHERE state = 'REQUEUED' AND source_format = 'jobcomp'")
[ "$requeued" -ge 1 ] || fail "no requeued run was charged through serve (job $ID_requeue)"
runs_requeue=$(sql "$URL1" "SELECT count(*) FROM job WHERE scheduler_job_id = '$ID_requeue'")
[ "$runs_requeue" = 2 ] || fail "job $ID_requeue has $runs_requeue runs in serve's ledger, expected 2 (the requeued one and the last)"
jobs_serve=$(cut -f4 "$OUT/ledger-serve.tsv" | sort -u | wc -l)
entries_serve=$(cut -f9 "$OUT/ledger-serve.tsv" | grep -c .)
jobs_import=$(cut -f4 "$OUT/ledger-import.tsv" | sort -u | wc -l)
SUMMARY+=(
    "jobs run:           $((STARTED + NEVER_STARTED)) in sacct -X ($((${#IDS[@]} - BURST)) submissions, one an array of 3, then a burst of $BURST): $STARTED started, $NEVER_STARTED never did"
    "jobs in ledger:     $jobs_serve via serve ($entries_serve entries), $jobs_import via sacct import into a fresh ledger"
    "total charged:      $charged USD (statements: $stated; the rules, computed from sacct: $EXPECTED_TOTAL)"
    "requeue:            job $ID_requeue requeued while running: $runs_requeue runs charged via serve ($requeued posted by Slurm as PENDING), the same as sacct --duplicates"
    "serve restart:      SIGTERM: exit $SERVE_RC in ${SERVE_STOP_SECS}s; down ~6s; $retried jobs that ended meanwhile came in by Slurm's retries; longest end-to-ledger delay after the restart ${longest}s"
    "re-import into serve's ledger: recorded $again_recorded, replayed $again_replayed, revised $again_revised, superseded $again_superseded"
    "serve /metrics:     documents: ${outcomes%, }; HTTP statuses: ${statuses% }"
)

# ------------------------------------------------------------------ budgets: slurm sync (docs/budgets.md)
# A project with a tiny allocation runs jobs until the ledger says it is
# spent; `slurm sync` then blocks its account (GrpJobs=0): its next job stays
# pending with Slurm's reason, running jobs untouched; a grant and a sync let
# it start. (After every check above: these jobs are not in their totals.)
sacctmgr -i add account e2e0003 Description=hpc-ledger-e2e-budget Organization=e2e >/dev/null || die "sacctmgr: cannot add e2e0003"
sacctmgr -i add user root Account=e2e0003 >/dev/null || die "sacctmgr: cannot add root to e2e0003"
ledger "$L1" alloc grant E2E0003 0.50 --from 2020-01-01 --reason "e2e: a tiny allocation" >/dev/null || die "alloc grant failed"
sync_slurm() { ledger "$L1" slurm sync --cluster "$CLUSTER" 2>&1; }
out=$(sync_slurm) || fail "slurm sync failed: $out"
for i in 1 2; do   # 1 core for 3 s at 413.7 a core-hour: 0.34 each
    sb -J "budget$i" -A E2E0003 -p regular -N 1 -n 1 --mem=128M -t 2 --wrap 'sleep 3' >/dev/null || die "sbatch budget$i failed"
done
b_recorded() { [ "$(sql "$URL1" "SELECT count(DISTINCT r.job_id) FROM job_record r JOIN project p ON p.id = r.project_id WHERE p.code = 'E2E0003'")" -ge 2 ]; }
waitfor 180 "the ledger to charge E2E0003's two jobs" b_recorded
remaining=$(ledger "$L1" balance E2E0003 --format json | "$PY" -c 'import json, sys; print(json.load(sys.stdin)[0]["remaining"])')
out=$(sync_slurm) || fail "slurm sync failed: $out"
grep -q "^block E2E0003 (account e2e0003" <<< "$out" || fail "slurm sync did not block the spent E2E0003 ($remaining left): $out"
B_ID=$(sb -J budget3 -A E2E0003 -p regular -N 1 -n 1 --mem=128M -t 2 --wrap 'sleep 3') || die "sbatch budget3 failed"
B_ID=${B_ID%%;*}
b_state=""
for ((i = 0; i < 60; i++)); do
    b_state=$(squeue -h -j "$B_ID" -o '%T %r')
    [ "$b_state" = "PENDING AssocGrpJobsLimit" ] && break
    sleep 0.5
done
[ "$b_state" = "PENDING AssocGrpJobsLimit" ] || fail "E2E0003's job $B_ID after the block: '$b_state', expected 'PENDING AssocGrpJobsLimit'"
b_first=$b_state
sleep 5
b_state=$(squeue -h -j "$B_ID" -o '%T %r')
[ "$b_state" = "PENDING AssocGrpJobsLimit" ] || fail "E2E0003's job $B_ID 5 s later: '$b_state', expected still pending"
out=$(sync_slurm)
grep -q "nothing to change" <<< "$out" || fail "a second slurm sync changed something: $out"
ledger "$L1" alloc grant E2E0003 100.00 --from 2020-01-01 --reason "e2e: a top-up" >/dev/null || die "alloc grant failed"
out=$(sync_slurm) || fail "slurm sync failed: $out"
grep -q "^unblock E2E0003" <<< "$out" || fail "slurm sync did not unblock E2E0003 after the top-up: $out"
b_started() { [ "$(squeue -h -j "$B_ID" -o %T)" != PENDING ]; }
waitfor 90 "E2E0003's job $B_ID to start after the top-up" b_started
actions=$(sql "$URL1" "SELECT string_agg(action, ',' ORDER BY id) FROM enforcement_action")
[ "$actions" = "block,unblock" ] || fail "enforcement_action holds '$actions', expected 'block,unblock'"
SUMMARY+=("budgets:            E2E0003 spent its 0.50 ($remaining left); after slurm sync its job $B_ID was '$b_first'; after a top-up and a sync it was '$(squeue -h -j "$B_ID" -o %T)' (sacctmgr changes recorded: $actions)")

# ------------------------------------------------------------------ jobcomp/filetxt (docs/slurm.md)
# slurmctld restarted with JobCompType=jobcomp/filetxt: the lines it writes for
# real jobs (a name and a working directory with spaces, two nodes, GPUs, an
# array, a failure, one cancelled while pending), imported into the second
# ledger, charge what check.py computes from the same jobs' sacct output and
# what that output imported into the first ledger charges; the sacct output
# imported after them into the second ledger records nothing new.
waitfor 120 "the queue to empty" queue_empty
FILETXT=$OUT/jobcomp-filetxt.log
: > "$FILETXT"
chown slurm:slurm "$FILETXT"
sed -i -e 's|^JobCompType=.*|JobCompType=jobcomp/filetxt|' -e "s|^JobCompLoc=.*|JobCompLoc=$FILETXT|" "$ETC/slurm.conf"
stop_pid "$(pidfile "$VAR/run/slurmctld.pid")" slurmctld
slurmctld || die "slurmctld did not start with jobcomp/filetxt: $(tail -n 3 "$VAR/log/slurmctld.log")"
waitfor 60 slurmctld scontrol ping
waitfor 60 "nodes c01, c02 idle" nodes_idle
FT_IDS=()
ft() { # ft NAME SBATCH-ARGS...
    local id
    id=$(sbatch --parsable -o "$JOBS/%x-%j.out" -J "$1" "${@:2}") || die "sbatch $1 failed"
    FT_IDS+=("${id%%;*}")
}
mkdir -p "$JOBS/a dir with spaces"
ft "ft spaced name" -D "$JOBS/a dir with spaces" -A E2E0001 -p regular -N 1 -n 1 --mem=256M -t 2 --wrap 'sleep 2'
ft ft-multinode -D "$JOBS" -A E2E0002 -p regular -N 2 --ntasks-per-node=1 --mem=300M -t 2 --wrap 'srun sleep 2'
ft ft-gpu -D "$JOBS" -A E2E0001 -p gpu -N 1 -n 2 --gres=gpu:2 --mem=1G -t 2 --wrap 'sleep 2'
ft ft-array -D "$JOBS" -A E2E0002 -p regular -N 1 -n 1 --mem-per-cpu=256M --array=0-1 -t 2 --wrap 'sleep 2'
ft ft-fails -D "$JOBS" -A E2E0001 -p hugemem -N 1 -c 2 --mem=6G -t 2 --wrap 'sleep 1; exit 3'
ft ft-cancel-pending -D "$JOBS" -A E2E0002 -p regular -N 1 -n 1 --mem=128M -t 5 --begin=now+3600 --wrap 'sleep 2'
scancel "${FT_IDS[-1]}"
waitfor 180 "the queue to empty" queue_empty
ft_lines() { [ "$(wc -l < "$FILETXT")" -ge 7 ]; }  # 6 jobs, the array's 2 tasks
waitfor 60 "slurmctld to write 7 lines to $FILETXT" ft_lines
ft_settled() {
    sacct --parsable2 --noheader --allocations --duplicates -j "$(IFS=,; echo "${FT_IDS[*]}")" --format "$SACCT_FORMAT" \
        > "$OUT/sacct-filetxt.tmp" || return 1
    [ "$(wc -l < "$OUT/sacct-filetxt.tmp")" -ge 7 ] && ! awk -F'|' '$14 == "Unknown" || $17 ~ /^(PENDING|RUNNING|COMPLETING|SUSPENDED)/ {bad = 1} END {exit !bad}' "$OUT/sacct-filetxt.tmp"
}
waitfor 60 "slurmdbd to record the end of the filetxt jobs" ft_settled
sacct --parsable2 --allocations --duplicates -j "$(IFS=,; echo "${FT_IDS[*]}")" --format "$SACCT_FORMAT" > "$OUT/sacct-filetxt.txt" \
    || die "sacct failed"
read -r FT_STARTED FT_NEVER FT_TOTAL < <("$PY" "$HERE/check.py" total "$CONFIG" "$OUT/sacct-filetxt.txt")
FT_IN=$(printf "'%s'," "${FT_IDS[@]}")
FT_SQL=${LEDGER_SQL/ ORDER BY/ AND j.scheduler_job_id IN (${FT_IN%,}) ORDER BY}
ledger "$L2" import --format jobcomp-filetxt --output json "$FILETXT" > "$OUT/import-filetxt.json" 2>"$OUT/import-filetxt.err"
rc=$?
[ $rc = 0 ] || fail "import --format jobcomp-filetxt exited $rc (out/import-filetxt.json, out/import-filetxt.err)"
ft_recorded=$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1])).get("recorded"))' "$OUT/import-filetxt.json" 2>/dev/null)
[ "$ft_recorded" = "$FT_STARTED" ] || fail "the filetxt import recorded $ft_recorded jobs, sacct says $FT_STARTED started"
sql "$URL2" "$FT_SQL" > "$OUT/ledger-filetxt.tsv" || die "cannot read the second ledger"
check verify "$CONFIG" "$OUT/sacct-filetxt.txt" "$OUT/ledger-filetxt.tsv" filetxt --source jobcomp-filetxt --one-record \
    || fail "the ledger fed by the jobcomp/filetxt log differs from the charges computed from sacct"
ledger "$L1" import --format slurm --output json "$OUT/sacct-filetxt.txt" > "$OUT/import-filetxt-sacct.json" 2>&1 \
    || fail "import of the filetxt jobs' sacct output into the first ledger failed (out/import-filetxt-sacct.json)"
sql "$URL1" "$FT_SQL" > "$OUT/ledger-filetxt-sacct.tsv" || die "cannot read the first ledger"
check same "$OUT/ledger-filetxt.tsv" "$OUT/ledger-filetxt-sacct.tsv" filetxt sacct \
    || fail "the jobcomp/filetxt log and sacct charged some jobs differently"
ledger "$L2" import --format slurm --output json "$OUT/sacct-filetxt.txt" > "$OUT/import-filetxt-again.json" 2>&1
ft_again=$("$PY" -c 'import json, sys; s = json.load(open(sys.argv[1])); print(s.get("recorded"), s.get("superseded"), sum(s.get("rejected", {}).values()))' "$OUT/import-filetxt-again.json" 2>/dev/null)
[ "$ft_again" = "0 0 0" ] || fail "sacct's output imported after the filetxt log recorded/superseded/rejected '$ft_again', expected '0 0 0'"
ledger "$L2" audit --deep > "$OUT/audit-deep-filetxt.txt" 2>&1 \
    || fail "hpc-ledger audit --deep after the filetxt import exited $? (out/audit-deep-filetxt.txt)"
ft_charged=$(sql "$URL2" "SELECT coalesce(sum(le.amount), 0) FROM ledger_entry le JOIN job_record r ON r.id = le.job_record_id JOIN job j ON j.id = r.job_id WHERE j.scheduler_job_id IN (${FT_IN%,})")
[ "$ft_charged" = "$FT_TOTAL" ] || fail "the filetxt jobs were charged $ft_charged, the rules give $FT_TOTAL"
SUMMARY+=("jobcomp/filetxt:    $(wc -l < "$FILETXT") lines for jobs ${FT_IDS[*]}: $ft_recorded recorded ($FT_NEVER never started), $ft_charged USD (the rules, computed from sacct: $FT_TOTAL); sacct imported after them: recorded/superseded/rejected $ft_again")
