# A real Slurm on loopback for the tests, from Debian's packages (munge, slurmctld, slurmd):
# configuration, state, logs and sockets in one temporary directory, daemons stopped by their
# PIDs. Sourced; defines slurm_start DIR, slurm_stop, slurm_wait_job ID STATE TIMEOUT_S.
#   slurm_start "$tmp/slurm"   # exports SLURM_CONF; sbatch/scontrol/squeue then talk to it

slurm_start() {
  SLURM_DIR=$1
  mkdir -p "$SLURM_DIR"/{state,spool,log}
  chmod 700 "$SLURM_DIR"
  local node
  node=$(hostname -s)
  # Munge with its own key and socket (no system munged needed).
  dd if=/dev/urandom of="$SLURM_DIR/munge.key" bs=1024 count=1 status=none
  chmod 400 "$SLURM_DIR/munge.key"
  munged --socket="$SLURM_DIR/munge.socket" --key-file="$SLURM_DIR/munge.key" \
    --pid-file="$SLURM_DIR/munged.pid" --log-file="$SLURM_DIR/log/munged.log" \
    --seed-file="$SLURM_DIR/munge.seed" --force || return 1
  # Free ports on loopback for the two daemons. (CPUs below come from getconf, not nproc:
  # nproc honours OMP_NUM_THREADS, which the test environment sets to 1.)
  local ports
  ports=$(python3 -c 'import socket
s = [socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1", 0)) for x in s]
print(" ".join(str(x.getsockname()[1]) for x in s))')
  read -r ctld_port slurmd_port <<<"$ports"
  cat > "$SLURM_DIR/slurm.conf" <<CONF
ClusterName=superoffload-test
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$SLURM_DIR/munge.socket
CredType=cred/munge
StateSaveLocation=$SLURM_DIR/state
SlurmdSpoolDir=$SLURM_DIR/spool
SlurmctldPidFile=$SLURM_DIR/slurmctld.pid
SlurmdPidFile=$SLURM_DIR/slurmd.pid
SlurmctldLogFile=$SLURM_DIR/log/slurmctld.log
SlurmdLogFile=$SLURM_DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
JobRequeue=1
KillWait=10
MinJobAge=3600
InactiveLimit=0
NodeName=$node NodeAddr=127.0.0.1 CPUs=$(getconf _NPROCESSORS_ONLN) RealMemory=1000 State=UNKNOWN
PartitionName=test Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
  export SLURM_CONF=$SLURM_DIR/slurm.conf
  slurmctld -f "$SLURM_CONF" || return 1
  slurmd -f "$SLURM_CONF" -N "$node" || return 1
  local i
  for i in $(seq 100); do
    if sinfo -h -o '%T' 2>/dev/null | grep -qx idle; then return 0; fi
    sleep 0.2
  done
  echo "Slurm did not come up: $(sinfo 2>&1); $(tail -5 "$SLURM_DIR/log/slurmctld.log" "$SLURM_DIR/log/slurmd.log" 2>&1)" >&2
  return 1
}

slurm_stop() {
  [[ -n ${SLURM_DIR:-} ]] || return 0
  local name pid
  for name in slurmd slurmctld munged; do
    pid=$(cat "$SLURM_DIR/$name.pid" 2>/dev/null) || continue
    kill "$pid" 2>/dev/null
  done
  sleep 0.5
  for name in slurmd slurmctld munged; do
    pid=$(cat "$SLURM_DIR/$name.pid" 2>/dev/null) || continue
    kill -KILL "$pid" 2>/dev/null
  done
  # Anything else started from this directory (job steps, a daemon whose PID file is gone).
  pkill -KILL -f -- "$SLURM_DIR/" 2>/dev/null
  return 0
}

# slurm_job_state ID: PENDING, RUNNING, COMPLETED, FAILED, ...
slurm_job_state() { scontrol show job "$1" 2>/dev/null | sed -nE 's/.*JobState=([A-Z_]+).*/\1/p'; }

# slurm_wait_job ID STATE TIMEOUT_S: until the job is in STATE (a regex); fails on timeout.
slurm_wait_job() {
  local start=$SECONDS state
  while ((SECONDS - start < $3)); do
    state=$(slurm_job_state "$1")
    [[ $state =~ ^($2)$ ]] && return 0
    sleep 0.5
  done
  echo "job $1 is '$state' after $3 s, expected $2: $(scontrol show job "$1" 2>&1 | grep -E 'Reason|JobState')" >&2
  echo "slurmctld: $(tail -5 "$SLURM_DIR/log/slurmctld.log" 2>&1)" >&2
  echo "slurmd: $(tail -5 "$SLURM_DIR/log/slurmd.log" 2>&1)" >&2
  return 1
}
