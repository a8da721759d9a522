"""One run per workdir (``zhlm.workdir_lock``): a second run is refused with the holder named,
a lock left by a gone process is taken over with a warning, the lock is released at exit and on
an exception, the same on cloud storage (fsspec's memory file system standing in for GCS), and
two ``zhlm-pretrain`` commands on one workdir: the second stops, the first is unharmed. A run
whose lock another run took over stops before its next write, what it saved whole; a file given
as the workdir is said to be one."""

import datetime
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest
from helpers import ROOT, load_config, load_task, reviews_config

from zhlm import workdir_lock
from zhlm.train import metrics


def lock_file(workdir):
    return os.path.join(workdir, "lock.json")


def read_lock(workdir) -> dict:
    with open(lock_file(workdir)) as f:
        return json.load(f)


def put_lock(workdir, fields: dict):
    """Written whole (a heartbeat may be reading it)."""
    os.makedirs(workdir, exist_ok=True)
    with open(lock_file(workdir) + ".tmp", "w") as f:
        json.dump(fields, f)
    os.replace(lock_file(workdir) + ".tmp", lock_file(workdir))


def write_lock(workdir, host, pid, heartbeat_age=0.0, now=None):
    """A lock as another run would have left it, its last heartbeat ``heartbeat_age`` s before
    ``now`` (a time.time(); None: the clock's)."""
    now = time.time() if now is None else now
    then = datetime.datetime.fromtimestamp(now - heartbeat_age).astimezone()
    stamp = then.isoformat(timespec="seconds")
    holder = dict(command="zhlm-pretrain", pid=pid, host=host, started=stamp, heartbeat=stamp)
    put_lock(workdir, dict(holder, token="theirs"))


@pytest.fixture
def clock(monkeypatch):
    """The time the lock module reads (``time.time()``, which ages heartbeats) stopped at one
    instant, returned: a heartbeat written some seconds before it is exactly that old to the
    lock, however slowly the test runs."""
    now = time.time()

    class Stopped:
        def __getattr__(self, name):
            return getattr(time, name)

        def time(self):
            return now

    monkeypatch.setattr(workdir_lock, "time", Stopped())
    return now


class Beats(threading.Event):
    """A lock's stop event that lets its heartbeat thread through one beat at a time: the
    thread's wait returns only when the test calls :meth:`beat`, which returns once that beat
    is over (the thread waits again, or has ended)."""

    def __init__(self):
        super().__init__()
        self._go, self._waiting = threading.Semaphore(0), threading.Semaphore(0)

    def wait(self, timeout=None):
        if self.is_set():
            return True
        self._waiting.release()
        self._go.acquire()
        return self.is_set()

    def set(self):
        super().set()
        self._go.release()

    def beat(self, thread):
        assert self._waiting.acquire(timeout=60), "the heartbeat thread never waited"
        self._go.release()
        while not self._waiting.acquire(timeout=0.05):  # polls only to see the thread end
            if not thread.is_alive():
                return
        self._waiting.release()  # it waits again: the next beat may begin


def dead_pid():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_second_holder_is_refused_and_the_lock_is_released_at_exit(tmp_path):
    with workdir_lock.hold(tmp_path, "zhlm-pretrain"):
        holder = read_lock(tmp_path)
        assert (holder["pid"], holder["host"]) == (os.getpid(), socket.gethostname())
        with pytest.raises(workdir_lock.WorkdirLocked) as refused:
            with workdir_lock.hold(tmp_path, "zhlm-finetune"):
                pytest.fail("two holders")
    message = str(refused.value)
    assert f"pid {os.getpid()} on host {socket.gethostname()}" in message
    assert message.startswith(f"workdir {tmp_path} is in use by zhlm-pretrain")
    assert "\n" not in message and message.endswith("pick another --workdir")
    assert os.listdir(tmp_path) == []


def test_the_lock_is_released_on_an_exception(tmp_path):
    with pytest.raises(KeyError):
        with workdir_lock.hold(tmp_path, "zhlm-pretrain"):
            raise KeyError("boom")
    assert os.listdir(tmp_path) == []


def test_a_dead_process_lock_on_this_host_is_taken_over_with_a_warning(tmp_path, caplog):
    pid = dead_pid()
    write_lock(tmp_path, socket.gethostname(), pid)
    with workdir_lock.hold(tmp_path, "zhlm-pretrain"):
        assert read_lock(tmp_path)["pid"] == os.getpid()
    assert "taking over the lock" in caplog.text
    assert f"process {pid} is not running" in caplog.text


def test_a_lock_from_before_this_host_restarted_is_taken_over(tmp_path, caplog):
    if not workdir_lock._boot_id():
        pytest.skip("no boot id on this system")
    write_lock(tmp_path, socket.gethostname(), os.getpid())  # a live pid, reused since
    put_lock(tmp_path, dict(read_lock(tmp_path), boot="an earlier boot"))
    with workdir_lock.hold(tmp_path, "zhlm-pretrain"):
        assert read_lock(tmp_path)["boot"] == workdir_lock._boot_id()
    assert f"host {socket.gethostname()} has restarted since" in caplog.text


def test_a_live_lock_from_another_host_is_refused(tmp_path, clock):
    write_lock(tmp_path, "tpu-worker-7", 4242, heartbeat_age=120, now=clock)
    with pytest.raises(workdir_lock.WorkdirLocked, match="pid 4242 on host tpu-worker-7"):
        with workdir_lock.hold(tmp_path, "zhlm-pretrain"):
            pytest.fail("taken from a live run")
    assert read_lock(tmp_path)["token"] == "theirs"


def test_an_old_lock_from_another_host_is_taken_over_with_a_warning(tmp_path, caplog, clock):
    write_lock(tmp_path, "tpu-worker-7", 4242, heartbeat_age=3600, now=clock)
    with workdir_lock.hold(tmp_path, "zhlm-finetune"):
        assert read_lock(tmp_path)["command"] == "zhlm-finetune"
    assert "no heartbeat for 60 min (stale after 5 min)" in caplog.text
    assert not os.path.exists(lock_file(tmp_path))


def test_the_heartbeat_refreshes_the_lock_and_leaves_a_taken_one_alone(tmp_path):
    lock = workdir_lock._Lock(lock_file(tmp_path), "zhlm-pretrain")
    lock._stop = beats = Beats()
    lock.acquire()
    mine = read_lock(tmp_path)
    old = dict(mine, heartbeat="2001-01-01T00:00:00+00:00")
    put_lock(tmp_path, old)
    beats.beat(lock._beating)
    refreshed = read_lock(tmp_path)
    assert refreshed["heartbeat"] != old["heartbeat"]
    assert refreshed == dict(mine, heartbeat=refreshed["heartbeat"])
    put_lock(tmp_path, dict(mine, token="theirs"))  # taken over by another run
    beats.beat(lock._beating)
    assert read_lock(tmp_path) == dict(mine, token="theirs")  # not refreshed
    lock.release()
    assert read_lock(tmp_path) == dict(mine, token="theirs")  # nor removed


def test_one_of_many_runs_finding_a_stale_lock_takes_it(tmp_path):
    path = lock_file(tmp_path)
    stale = workdir_lock._Lock(path, "zhlm-pretrain")
    stale.fields.update(host="gone-host", heartbeat="2001-01-01T00:00:00+00:00")
    stale.file.create(stale._data())
    outcomes = []

    def contend():
        lock = workdir_lock._Lock(path, "zhlm-pretrain")
        try:
            lock.acquire()
            outcomes.append(lock)
        except workdir_lock.WorkdirLocked as e:
            outcomes.append(str(e))

    threads = [threading.Thread(target=contend) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [o for o in outcomes if isinstance(o, workdir_lock._Lock)]
    assert len(winners) == 1, outcomes
    assert all("is in use by" in o for o in outcomes if isinstance(o, str)), outcomes
    winners[0].release()
    assert workdir_lock._storage(path).read() is None


def test_cloud_storage_lock_refuses_and_releases():
    path = f"memory://zhlm-test-{uuid.uuid4().hex}/run/lock.json"
    first, second = (workdir_lock._Lock(path, c) for c in ("zhlm-pretrain", "zhlm-finetune"))
    first.acquire()
    with pytest.raises(workdir_lock.WorkdirLocked, match=r"memory://.*/run is in use by zhlm-pre"):
        second.acquire()
    first.release()
    second.acquire()
    assert json.loads(second.file.read())["command"] == "zhlm-finetune"
    second.release()


def test_pretraining_and_fine_tuning_refuse_a_held_workdir_before_writing(tmp_path):
    from zhlm.finetune.train import finetune
    from zhlm.train.loop import train_and_evaluate

    with workdir_lock.hold(tmp_path, "zhlm-pretrain"):
        with pytest.raises(workdir_lock.WorkdirLocked, match="in use by zhlm-pretrain"):
            train_and_evaluate(load_config("macbert", "tiny"), str(tmp_path))
        with pytest.raises(workdir_lock.WorkdirLocked, match="in use by zhlm-pretrain"):
            finetune(load_task("chnsenticorp"), None, str(tmp_path))
        assert os.listdir(tmp_path) == ["lock.json"]


# zhlm-pretrain, held once it has the workdir's lock until a line comes on its standard input:
# the second command then meets a first run that is certainly still running.
HELD_PRETRAIN = """
import contextlib, sys
from zhlm import workdir_lock
from zhlm.cli import pretrain

hold = workdir_lock.hold


@contextlib.contextmanager
def held(workdir, command):
    with hold(workdir, command) as lock:
        sys.stdin.readline()
        yield lock


workdir_lock.hold = held
pretrain.run()
"""


@pytest.mark.slow
def test_a_second_command_on_a_workdir_in_use_stops_and_the_first_is_unharmed(tmp_path):
    workdir = tmp_path / "run"
    args = ["--config=configs/macbert.py:tiny", f"--workdir={workdir}"]
    args += ["--config.train.batch_size=8", "--config.train.log_every=1"]
    args += ["--config.train.checkpoint_every=4", "--config.optim.warmup_steps=2"]
    log = tmp_path / "first.log"  # a file, not a pipe: nothing reads it while the first runs
    with open(log, "w") as out:
        first = subprocess.Popen(
            [sys.executable, "-c", HELD_PRETRAIN, *args, "--config.train.num_steps=12"],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=out, stderr=out, text=True,
        )  # fmt: skip
    deadline = time.time() + 300  # only against a hang: the lock appears when the first has it
    while not os.path.exists(lock_file(workdir)):
        assert first.poll() is None and time.time() < deadline, log.read_text()[-3000:]
        time.sleep(0.1)
    cmd = [sys.executable, "-m", "zhlm.cli.pretrain", *args, "--config.train.num_steps=13"]
    second = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert first.poll() is None  # held: the refusal came while the first was running
    first.stdin.write("go on\n")
    first.stdin.close()
    assert first.wait(timeout=600) == 0, log.read_text()[-3000:]
    assert second.returncode == 1 and "Traceback" not in second.stderr, second.stderr[-3000:]
    last = second.stderr.strip().splitlines()[-1]
    assert last.startswith(f"zhlm-pretrain: workdir {workdir} is in use by zhlm-pretrain"), last
    assert f"pid {first.pid} on host {socket.gethostname()}" in last
    assert [line["step"] for line in metrics.read(str(workdir))] == list(range(1, 13))
    with open(workdir / "config.json") as f:
        assert json.load(f)["train"]["num_steps"] == 12
    assert not os.path.exists(lock_file(workdir))


def test_a_file_as_workdir_is_refused_as_a_file(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("not a folder")
    with pytest.raises(workdir_lock.WorkdirLocked) as refused:
        with workdir_lock.hold(notes, "zhlm-pretrain"):
            pass
    assert str(refused.value) == (
        f"--workdir {notes} is a file, not a folder: give a folder (new or existing)"
    )
    with pytest.raises(workdir_lock.WorkdirLocked, match=f"is in {notes}, a file, not a folder"):
        with workdir_lock.hold(notes / "run", "zhlm-pretrain"):
            pass
    assert notes.read_text() == "not a folder"


def test_a_file_as_workdir_is_one_line_from_the_command(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("not a folder")
    cmd = [sys.executable, "-m", "zhlm.cli.finetune", "--config=finetune/chnsenticorp:tiny"]
    cmd += [f"--workdir={notes}", f"--config.task.train_file={notes}"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"zhlm-finetune: --workdir {notes} is a file, not a folder: give a folder (new or existing)"
    ]


def _take_over(workdir):
    """Another run takes the lock over (as after this one's heartbeat stalled for 5 min); waits
    until this run's heartbeat has seen it."""
    put_lock(workdir, dict(read_lock(workdir), token="theirs", pid=1, command="zhlm-other"))
    time.sleep(0.5)


def test_a_lost_lock_stops_the_holder_at_its_next_check(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(workdir_lock, "HEARTBEAT_SECONDS", 0.05)
    with pytest.raises(workdir_lock.WorkdirLost) as stopped:
        with workdir_lock.hold(tmp_path, "zhlm-pretrain") as held:
            held.check()  # still this run's
            _take_over(tmp_path)
            held.check()
    message = str(stopped.value)
    assert f"workdir {tmp_path} was taken over by zhlm-other (pid 1" in message
    assert "stopped so that the two runs do not mix their files" in message
    assert "\n" not in message
    assert read_lock(tmp_path)["token"] == "theirs"  # left to the new holder
    assert "now belongs to" not in caplog.text  # said once, by the error


@pytest.mark.slow
def test_pretraining_that_lost_its_lock_stops_before_its_next_write(tmp_path, monkeypatch):
    from zhlm.data import loader
    from zhlm.train import checkpoint
    from zhlm.train.loop import train_and_evaluate

    corpus = os.path.join(ROOT, "zhlm", "resources", "peoples_daily_199801_sample.txt")
    text = open(corpus, encoding="utf-8").read()
    (tmp_path / "corpus.txt").write_text(text[: text.index("\n\n", 30_000) + 2], "utf-8")
    config = load_config("bert", "tiny")
    config.data.input = (str(tmp_path / "corpus.txt"),)
    config.data.max_seq_length = 64
    config.train.update(batch_size=8, num_steps=8, log_every=1, eval_every=0, checkpoint_every=4)
    config.optim.warmup_steps = 2
    workdir = tmp_path / "run"
    monkeypatch.setattr(workdir_lock, "HEARTBEAT_SECONDS", 0.05)
    original = loader.Loader.__next__

    def next_batch(self):
        if self.sampler.step == 5:  # the batch of step 6, after checkpoint 4
            _take_over(workdir)
        return original(self)

    monkeypatch.setattr(loader.Loader, "__next__", next_batch)
    with pytest.raises(workdir_lock.WorkdirLost, match="was taken over by zhlm-other"):
        train_and_evaluate(config, str(workdir))
    assert [line["step"] for line in metrics.read(str(workdir))] == [1, 2, 3, 4, 5]
    assert sorted(os.listdir(workdir / "checkpoints")) == ["4"]
    assert checkpoint.load(str(workdir)).description.endswith("(step 4)")  # whole
    assert read_lock(workdir)["token"] == "theirs"


@pytest.mark.slow
def test_fine_tuning_that_lost_its_lock_stops_before_its_next_write(tmp_path, monkeypatch):
    from zhlm.finetune import progress as progress_lib
    from zhlm.finetune.train import finetune

    config = reviews_config(tmp_path, epochs=2)
    config.task.length_buckets = (16,)
    workdir = tmp_path / "run"
    monkeypatch.setattr(workdir_lock, "HEARTBEAT_SECONDS", 0.05)
    save_epoch = progress_lib.Progress.save_epoch

    def then_taken_over(self, *args, **kwargs):
        save_epoch(self, *args, **kwargs)
        _take_over(workdir)

    monkeypatch.setattr(progress_lib.Progress, "save_epoch", then_taken_over)
    with pytest.raises(workdir_lock.WorkdirLost, match="was taken over by zhlm-other"):
        finetune(config, None, str(workdir))
    assert [line["epoch"] for line in metrics.read(str(workdir), None)] == [1]  # not epoch 2
    kept = json.loads((workdir / "progress" / "progress.json").read_text())
    assert kept["current"]["epoch"] == 1
    assert sorted(os.listdir(workdir / "progress")) == ["best-0-1", "progress.json", "state-0-1"]
    assert not (workdir / "results.json").exists()
    assert read_lock(workdir)["token"] == "theirs"
