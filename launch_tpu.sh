#!/usr/bin/env bash
# launch_tpu.sh: run zhlm-pretrain on a Cloud TPU VM or pod slice, and keep it running.
#
# Why: a pod slice has several hosts (workers) and each must get the same code, the same
# install and the same command at the same time; spot and preemptible TPUs also disappear
# mid-run. This script does all of that with plain gcloud commands:
#   1. describe the TPU; create it if it is missing, delete and re-create it if PREEMPTED or
#      TERMINATED (a new VM resumes from the workdir's checkpoints, so --workdir should be gs://);
#   2. copy this checkout's HEAD (git archive, scp) or clone --repo to ~/zhlm on every worker;
#   3. pip install 'jax[tpu]' -e '.[gcs]' once per worker and commit (marker
#      ~/.zhlm_installed_COMMIT; the gcs extra lets zhlm write the gs:// workdir);
#   4. run zhlm-pretrain --config.train.distributed=True on every worker, logs to the terminal
#      and to $ZHLM_LAUNCH_LOGS/NAME-TIMESTAMP.log (default launch_logs/);
#   5. if that fails and the TPU is now PREEMPTED, go back to 1 (at most --max-restarts times);
#      otherwise exit with the run's exit status.
#
# Usage:
#   ./launch_tpu.sh --tpu=bert-base --zone=us-central2-b --accelerator-type=v4-32 --spot \
#       --workdir=gs://BUCKET/bert-base -- --config=configs/bert.py:base \
#       --config.data.data_dir=gs://BUCKET/data --config.train.batch_size=4096
#   ./launch_tpu.sh --dry-run ...   # print the commands (as for a TPU that does not exist yet)
#   ./launch_tpu.sh --plan --dry-run ...   # also compile the step for the slice, here, first
#
# --plan runs zhlm-compile locally (libtpu's compiler; pip install -e '.[tpu]') for
# --accelerator-type with the same zhlm-pretrain arguments and stops before any gcloud command
# when the program does not fit the chips' HBM, so a pod is never rented for it.
# --dry-run runs no gcloud command at all (not even describe) and writes no file; it only reads
# the local git checkout. GCLOUD overrides the gcloud binary (default: gcloud on PATH).
set -euo pipefail

usage() {
  cat <<'EOF'
usage: launch_tpu.sh --tpu=NAME --zone=ZONE --workdir=DIR [options] [-- ZHLM_PRETRAIN_ARGS...]
  --tpu=NAME                TPU VM or pod slice name (required)
  --zone=ZONE               e.g. us-central2-b (required)
  --workdir=DIR             zhlm-pretrain --workdir, usually gs://BUCKET/RUN (required)
  --accelerator-type=TYPE   default v4-8
  --runtime-version=VER     default tpu-ubuntu2204-base
  --project=PROJECT         passed to gcloud as --project
  --spot | --preemptible    create a spot (or older preemptible) TPU
  --repo=URL [--branch=B]   clone URL on the workers (default: copy this checkout's HEAD)
  --config=CONFIG           forwarded to zhlm-pretrain, e.g. configs/bert.py:base
  --max-restarts=N          restarts after preemption, default 3
  --plan                    first compile the step for the slice here (zhlm-compile); stop
                            if it does not fit (runs even with --dry-run: it is local)
  --dry-run                 print every command, run nothing
  --help                    this message
Everything after -- goes to zhlm-pretrain unchanged.
EOF
}
usage_error() { printf 'launch_tpu.sh: %s\n\n' "$1" >&2; usage >&2; exit 2; }
die() { printf 'launch_tpu.sh: %s\n' "$1" >&2; exit 1; }
say() { printf '== %s\n' "$1" >&2; }

tpu="" zone="" workdir="" accel="v4-8" version="tpu-ubuntu2204-base" project="" spot=""
repo="" branch="" config="" max_restarts=3 dry_run=0 plan=0
extra=()
while [ $# -gt 0 ]; do
  arg=$1 val="" has_val=0
  case $arg in
    --) shift; extra=("$@"); break ;;
    --*=*) arg=${1%%=*} val=${1#*=} has_val=1 ;;
    --tpu | --zone | --workdir | --accelerator-type | --runtime-version | --project | --repo | \
      --branch | --config | --max-restarts)
      case ${2-} in '' | --*) usage_error "$arg needs a value" ;; esac
      val=$2 has_val=1 && shift ;;
    --*) ;;
    *) usage_error "unexpected argument '$arg' (zhlm-pretrain arguments go after --)" ;;
  esac
  case $arg in --spot | --preemptible | --dry-run | --plan | --help)
    [ "$has_val" = 0 ] || usage_error "$arg takes no value" ;; esac
  case $arg in
    --tpu) tpu=$val ;;
    --zone) zone=$val ;;
    --workdir) workdir=$val ;;
    --accelerator-type) accel=$val ;;
    --runtime-version) version=$val ;;
    --project) project=$val ;;
    --repo) repo=$val ;;
    --branch) branch=$val ;;
    --config) config=$val ;;
    --max-restarts) max_restarts=$val ;;
    --spot | --preemptible) spot=${spot:-$arg}
      [ "$spot" = "$arg" ] || usage_error "--spot or --preemptible, not both" ;;
    --dry-run) dry_run=1 ;;
    --plan) plan=1 ;;
    --help) usage; exit 0 ;;
    *) usage_error "unknown option '$arg'" ;;
  esac
  shift
done
[ -n "$tpu" ] || usage_error "missing --tpu=NAME"
[ -n "$zone" ] || usage_error "missing --zone=ZONE"
[ -n "$workdir" ] || usage_error "missing --workdir=DIR (usually gs://BUCKET/RUN)"
case $max_restarts in '' | *[!0-9]*) usage_error "--max-restarts needs a whole number" ;; esac
[ -z "$branch" ] || [ -n "$repo" ] || usage_error "--branch needs --repo"
case $workdir in
  gs://*) ;;
  *) say "warning: --workdir=$workdir is not gs://: not shared by workers, lost with the VM" ;;
esac

GCLOUD=${GCLOUD:-gcloud}
loc=(--zone="$zone")
[ -z "$project" ] || loc+=(--project="$project")
root=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# run: print a command, shell-quoted so it can be pasted, to fd 3 (stdout, even inside $(...)),
# then run it unless --dry-run.
quote() {
  local out="" w
  for w in "$@"; do
    case $w in '' | *[!A-Za-z0-9_./:=@%+,-]*) w="'${w//\'/\'\\\'\'}'" ;; esac
    out+="${out:+ }$w"
  done
  printf '%s' "$out"
}
run() { printf '+ %s\n' "$(quote "$@")" >&3; [ "$dry_run" = 1 ] || "$@"; }
exec 3>&1
tpu_cmd() { run "$GCLOUD" compute tpus tpu-vm "$1" "$tpu" "${loc[@]}" "${@:2}"; }
ssh_all() { tpu_cmd ssh --worker=all --command="$1"; }
describe=(compute tpus tpu-vm describe "$tpu" "${loc[@]}" --format='value(state)')
tpu_state() { "$GCLOUD" "${describe[@]}" 2>/dev/null; }

# The commands the workers run (bash on the TPU VM; every local value is quoted with %q).
if [ -n "$repo" ]; then
  fetch="rm -rf ~/zhlm && git clone --depth=1${branch:+ --branch=$(printf '%q' "$branch")}"
  fetch+=" $(printf '%q' "$repo") ~/zhlm"
  commit_expr="\$(git -C ~/zhlm rev-parse HEAD)"
else
  commit=$(git -C "$root" rev-parse HEAD 2>/dev/null) \
    || die "$root is not a git checkout with a commit; commit it or give --repo=URL"
  [ -z "$(git -C "$root" status --porcelain --untracked-files=no)" ] \
    || say "note: uncommitted changes are not copied (git archive HEAD = ${commit:0:12})"
  fetch="rm -rf ~/zhlm && mkdir ~/zhlm && tar -xzf ~/zhlm.tar.gz -C ~/zhlm && rm ~/zhlm.tar.gz"
  commit_expr=$commit
fi
install="c=$commit_expr && if [ -e ~/.zhlm_installed_\$c ]; then"
install+=" echo \"zhlm \$c already installed on \$(hostname)\"; else cd ~/zhlm"
install+=" && python3 -m pip install 'jax[tpu]' -e '.[gcs]' && touch ~/.zhlm_installed_\$c; fi"
# ml_collections wants --config before any --config.* override: distributed=True goes last.
pretrain=(--workdir="$workdir")
[ -z "$config" ] || pretrain+=(--config="$config")
distributed=--config.train.distributed=True
for a in ${extra[@]+"${extra[@]}"}; do
  case $a in --config.train.distributed*) distributed="" ;; esac
done
pretrain+=(${extra[@]+"${extra[@]}"} ${distributed:+"$distributed"})
train="export PATH=\"\$HOME/.local/bin:\$PATH\" && cd ~/zhlm && zhlm-pretrain"
train+=$(printf ' %q' "${pretrain[@]}")

# Step 0 (--plan): the program must fit the slice before anything is created or rented.
if [ "$plan" = 1 ]; then
  compile=("${ZHLM_COMPILE:-zhlm-compile}" --topology="$accel")
  [ -z "$config" ] || compile+=(--config="$config")
  for a in ${extra[@]+"${extra[@]}"}; do
    case $a in --config.train.distributed*) ;; *) compile+=("$a") ;; esac
  done
  printf '+ %s\n' "$(quote "${compile[@]}")" >&3
  command -v "${compile[0]}" >/dev/null \
    || die "--plan needs ${compile[0]} (pip install -e '.[tpu]') on PATH"
  "${compile[@]}" || die "zhlm-compile: the step does not fit or fails on $accel; not launching"
fi

# Step 1: a READY TPU named $tpu.
ensure_tpu() {
  local state=""
  if [ "$dry_run" = 1 ]; then
    run "$GCLOUD" "${describe[@]}"
    say "dry run: assuming $tpu does not exist"
  else
    state=$(tpu_state) || state=""
  fi
  case $state in
    "") say "creating $tpu ($accel, $version${spot:+, ${spot#--}})" ;;
    PREEMPTED | TERMINATED) say "$tpu is $state: re-creating it"; tpu_cmd delete --quiet ;;
    READY) say "$tpu exists and is READY"; return 0 ;;
    *) say "$tpu is $state; using it as it is"; return 0 ;;
  esac
  tpu_cmd create --accelerator-type="$accel" --version="$version" ${spot:+"$spot"}
}

# Step 2: the code in ~/zhlm on every worker.
copy_code() {
  if [ -z "$repo" ]; then
    run "$GCLOUD" compute tpus tpu-vm scp --recurse "$tarball" "$tpu:zhlm.tar.gz" "${loc[@]}" \
      --worker=all
  fi
  ssh_all "$fetch"
}

tarball="${TMPDIR:-/tmp}/zhlm-launch.XXXXXX/zhlm.tar.gz"
if [ "$dry_run" = 0 ] && [ -z "$repo" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  tarball="$tmp/zhlm.tar.gz"
fi
[ -n "$repo" ] || run git -C "$root" archive --format=tar.gz -1 -o "$tarball" HEAD
logdir=${ZHLM_LAUNCH_LOGS:-launch_logs}
log="$logdir/$tpu-$(date -u +%Y%m%dT%H%M%SZ).log"
[ "$dry_run" = 1 ] || { mkdir -p "$logdir"; say "logs: $log"; }

restarts=0
while :; do  # steps 1-5
  ensure_tpu
  copy_code
  ssh_all "$install"
  if [ "$dry_run" = 1 ]; then ssh_all "$train"; exit 0; fi
  rc=0
  ssh_all "$train" 2>&1 | tee -a "$log" || rc=${PIPESTATUS[0]}
  [ "$rc" != 0 ] || { say "zhlm-pretrain finished on every worker"; exit 0; }
  state=$(tpu_state) || state=""
  if [ "$state" != PREEMPTED ]; then
    say "the run failed (exit $rc) and $tpu is ${state:-gone}, not PREEMPTED: not restarting"
    exit "$rc"
  fi
  if [ "$restarts" -ge "$max_restarts" ]; then
    say "$tpu was preempted; giving up after $restarts restart(s) (--max-restarts=$max_restarts)"
    exit "$rc"
  fi
  restarts=$((restarts + 1))
  say "$tpu was preempted: restart $restarts of $max_restarts (resuming from $workdir)"
  # A preempted run may not have released the workdir's lock (zhlm/workdir_lock.py); its TPU is
  # gone, so no run holds it: remove it, or the new run would be refused until it went stale.
  case $workdir in
    gs://*) run "$GCLOUD" storage rm "$workdir/lock.json" 2>/dev/null || true ;;
  esac
done
