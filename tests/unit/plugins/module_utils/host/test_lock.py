"""host/lock.py (host_lock's logic): the host lock's wait, on the monotonic clock, names the holder when it
gives up; two holders on one lock file exclude each other, and dropping the token frees the lock."""
from __future__ import annotations

import inspect
import os
import re
import subprocess
import threading
import time

import pytest
from ansible_collections.dflash.deploy.plugins.module_utils.host import lock as mod
from lock_probe import locked, until

HOLDER = ("20261201T101500-42 from ops@ctl (ansible-playbook pid 4242, play 'Deploy SGLang with DFlash "
          "speculative decoding'), holding it as pid 777 on ct200")
WHO = "from ops@ctl (ansible-playbook pid 4242, play 'Deploy SGLang with DFlash speculative decoding')"
# extensions/molecule/faults/tasks/concurrent.yml: what the second of two runs at once must say
FAULTS_HOLDER_RE = (r"another dflash.deploy run holds the host lock on ct200 \([0-9T]+-[0-9]+ from [a-z0-9_-]+@\S+ "
                    r"\(ansible-playbook pid [0-9]+, play 'Deploy SGLang with DFlash speculative decoding'\), "
                    r"holding it as pid [0-9]+ on ct200\)")


class Clock:
    """A monotonic clock the test moves: each sleep advances it by exactly the interval."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def never_exits():
    return None


# -- the holder text ------------------------------------------------------------------------------------------

def test_the_first_word_of_the_holder_is_the_token():
    assert mod.holds(HOLDER, "20261201T101500-42")
    assert not mod.holds(HOLDER, "20261201T101500-4")          # a prefix is not the token
    assert not mod.holds("", "")
    assert not mod.holds(HOLDER, "")


def test_the_holder_text_names_the_token_the_flock_pid_and_the_host():
    assert mod.parse_holder(HOLDER + "\n") == mod.Holder(text=HOLDER, token="20261201T101500-42", pid=777,
                                                         host="ct200")
    # an owner file from before the lock named its holder, or a torn write: the token, no pid
    assert mod.parse_holder("20261201T101500-42 from ops@ctl") == mod.Holder(
        "20261201T101500-42 from ops@ctl", "20261201T101500-42", None, "")
    assert mod.parse_holder("") == mod.Holder("", "", None, "")


def test_the_token_file_holds_the_token_then_who_runs_it_on_one_line():
    assert mod.token_text("20261201T101500-42", WHO) == "20261201T101500-42 " + WHO
    assert mod.token_text("t", "from ops@ctl\n  (ansible-playbook pid 1,\nplay 'p')") == (
        "t from ops@ctl (ansible-playbook pid 1, play 'p')")
    assert mod.token_text("t", "") == "t"


@pytest.mark.parametrize("token", ["", "a b", "../x", "-x", "x/y", "a" * 129, None, ".hidden"])
def test_a_token_that_cannot_end_a_file_name_is_refused(token):
    with pytest.raises(mod.LockError):
        mod.token_path("/run/dflash-deploy.token-", token)


def test_a_token_is_one_word_ending_the_token_file_s_name():
    assert mod.token_path("/run/dflash-deploy.token-", "20261201T101500-42") == (
        "/run/dflash-deploy.token-20261201T101500-42")


@pytest.mark.parametrize("wait, max_age", [(-1, 10), (600, 600), (600, 10)])
def test_a_wait_the_holder_would_not_outlive_is_refused(wait, max_age):
    with pytest.raises(mod.LockError):
        mod.check_times(wait, max_age)


# -- the failure message --------------------------------------------------------------------------------------

def test_the_failure_names_the_holder_and_the_way_out():
    assert mod.held_message("ct200", HOLDER) == (
        "another dflash.deploy run holds the host lock on ct200 (" + HOLDER + "); wait for it to finish, or, "
        "if that run died, remove its token /run/dflash-deploy.token-* on the host")
    assert re.search(FAULTS_HOLDER_RE, mod.held_message("ct200", HOLDER))
    assert "(unknown holder)" in mod.held_message("ct200", "")
    assert mod.held_message("ct200", "", "/tmp/t/token-").endswith("remove its token /tmp/t/token-* on the host")


def test_a_holder_that_broke_is_not_called_another_run():
    msg = mod.broken_message("ct200", "/run/dflash-deploy.lock", 127)
    assert msg == ("the host lock on ct200 could not be taken: its holder (/usr/bin/flock on "
                   "/run/dflash-deploy.lock) exited with status 127 before it held the lock "
                   "(/usr/bin/timeout or /usr/bin/flock is missing)")
    assert "could not be opened or locked" in mod.broken_message("ct200", "/run/dflash-deploy.lock", 1)


def test_the_holder_runs_flock_by_absolute_path_waiting_and_bounded_by_max_age():
    argv = mod.holder_argv("/run/dflash-deploy.lock", "/run/dflash-deploy.owner", "/run/dflash-deploy.token-t",
                           "ct200", 600, 14400)
    assert argv[:9] == ["/usr/bin/timeout", "14400", "/usr/bin/flock", "-w", "600", "-E", "75",
                        "/run/dflash-deploy.lock", "/bin/sh"]
    assert argv[10:] == [mod.HOLDER_SCRIPT, "/run/dflash-deploy.token-t", "ct200", "/run/dflash-deploy.owner"]
    assert mod.PATH == "/usr/sbin:/usr/bin:/sbin:/bin"


# -- the wait, on a fake clock --------------------------------------------------------------------------------

def test_held_when_the_holder_names_this_run(tmp_path):
    owner = tmp_path / "owner"
    owner.write_text(HOLDER + "\n")
    clock = Clock()
    assert mod.wait_for(str(owner), "20261201T101500-42", 5, never_exits, clock, clock.sleep, 0.5) == mod.Waited(
        held=True, seconds=0.0, holder=HOLDER, status=None)


def test_gives_up_after_the_timeout_naming_the_other_holder(tmp_path):
    owner = tmp_path / "owner"
    owner.write_text(HOLDER)
    clock = Clock()
    result = mod.wait_for(str(owner), "20261201T110000-7", 3, never_exits, clock, clock.sleep, 0.5)
    assert result == mod.Waited(held=False, seconds=3.0, holder=HOLDER, status=None)


def test_the_holder_file_appearing_later_is_seen(tmp_path):
    owner = tmp_path / "owner"
    clock = Clock()

    def sleep(seconds):
        clock.sleep(seconds)
        if clock.now >= 1002:
            owner.write_text("mine from me@ctl, holding it as pid 9 on ct200")
    result = mod.wait_for(str(owner), "mine", 10, never_exits, clock, sleep, 0.5)
    assert result.held and result.seconds == 2.0


def test_a_holder_that_gave_up_ends_the_wait_before_its_timeout(tmp_path):
    owner = tmp_path / "owner"
    owner.write_text(HOLDER)
    clock = Clock()
    result = mod.wait_for(str(owner), "mine", 600, lambda: 75 if clock.now >= 1001 else None, clock, clock.sleep,
                          0.5)
    assert result == mod.Waited(held=False, seconds=1.0, holder=HOLDER, status=75)


def test_the_wait_is_measured_on_the_monotonic_clock():
    source = inspect.getsource(mod)
    assert "time.monotonic" in source and "time.time" not in source
    assert inspect.signature(mod.take).parameters["clock"].default is time.monotonic


class FakeHolder:
    """A holder that never takes the lock: it exits with ``status`` at ``at`` on the clock, or never."""

    def __init__(self, clock, status=None, at=None):
        self.clock, self.status, self.at = clock, status, at
        self.pid = 999999999
        self.terminated = False

    def poll(self):
        if self.terminated:
            return -15
        return self.status if self.at is not None and self.clock.now >= self.at else None

    def terminate(self):
        self.terminated = True

    def wait(self, timeout=None):
        return self.poll()


def fake_take(tmp_path, clock, holder=None, spawn=None, **kw):
    args = dict(token="20261201T110000-7", holder=WHO, host="ct200", wait=3, max_age=60,
                lock=str(tmp_path / "lock"), owner=str(tmp_path / "owner"), prefix=str(tmp_path / "token-"),
                spawn=spawn or (lambda argv: holder), clock=clock, sleep=clock.sleep, interval=0.5)
    args.update(kw)
    return mod.take(**args)


def test_a_lock_held_for_the_whole_wait_drops_the_token_ends_the_holder_and_names_who_holds_it(tmp_path):
    (tmp_path / "owner").write_text(HOLDER + "\n")
    clock = Clock()
    holder = FakeHolder(clock)                     # flock never answers: the wait ends wait + GRACE seconds on
    taken = fake_take(tmp_path, clock, holder)
    assert not taken.held and not taken.changed and taken.seconds == 3 + mod.GRACE
    assert taken.msg == mod.held_message("ct200", HOLDER, str(tmp_path / "token-"))
    assert holder.terminated and not (tmp_path / "token-20261201T110000-7").exists()


def test_flock_giving_up_after_its_wait_fails_at_once(tmp_path):
    (tmp_path / "owner").write_text(HOLDER)
    clock = Clock()
    taken = fake_take(tmp_path, clock, FakeHolder(clock, status=75, at=1003))
    assert (taken.held, taken.seconds, taken.holder) == (False, 3.0, HOLDER)
    assert taken.msg.startswith("another dflash.deploy run holds the host lock on ct200 (" + HOLDER + ")")


def test_a_holder_that_could_not_run_says_so(tmp_path):
    clock = Clock()
    taken = fake_take(tmp_path, clock, FakeHolder(clock, status=127, at=1000))
    assert taken.msg == mod.broken_message("ct200", str(tmp_path / "lock"), 127)
    assert not (tmp_path / "token-20261201T110000-7").exists()

    def missing(argv):
        raise FileNotFoundError(2, "No such file or directory", argv[0])
    taken = fake_take(tmp_path, clock, spawn=missing)
    assert taken.msg == "the host lock on ct200 could not be taken: /usr/bin/timeout: No such file or directory"
    assert not (tmp_path / "token-20261201T110000-7").exists()


def test_the_token_file_is_written_before_the_holder_starts(tmp_path):
    clock = Clock()
    seen = []

    def spawn(argv):
        seen.append((argv, (tmp_path / "token-20261201T110000-7").read_text()))
        (tmp_path / "owner").write_text("20261201T110000-7 %s, holding it as pid 4 on ct200\n" % WHO)
        return FakeHolder(clock)
    taken = fake_take(tmp_path, clock, spawn=spawn)
    assert taken == mod.Taken(held=True, changed=True, holder="20261201T110000-7 %s, holding it as pid 4 on ct200"
                              % WHO, seconds=0.0, pid=4, msg="")
    assert seen[0][1] == "20261201T110000-7 %s\n" % WHO
    assert seen[0][0][-3:] == [str(tmp_path / "token-20261201T110000-7"), "ct200", str(tmp_path / "owner")]


def test_a_token_that_holds_the_lock_already_starts_nothing(tmp_path):
    (tmp_path / "token-20261201T101500-42").write_text("x")
    (tmp_path / "owner").write_text(HOLDER.replace("pid 777", "pid %d" % os.getpid()))
    taken = fake_take(tmp_path, Clock(), spawn=lambda argv: pytest.fail("started a second holder"),
                      token="20261201T101500-42")
    assert (taken.held, taken.changed, taken.pid) == (True, False, os.getpid())


def test_check_mode_writes_and_starts_nothing(tmp_path):
    (tmp_path / "owner").write_text(HOLDER)
    taken = fake_take(tmp_path, Clock(), spawn=lambda argv: pytest.fail("started a holder"), check_mode=True)
    assert (taken.held, taken.changed, taken.holder, taken.msg) == (False, True, HOLDER, "")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["owner"]


# -- real holders on a temporary lock file --------------------------------------------------------------------

needs_tools = pytest.mark.skipif(not all(os.access(p, os.X_OK) for p in (mod.FLOCK, mod.TIMEOUT, mod.SH)),
                                 reason="needs /usr/bin/flock, /usr/bin/timeout and /bin/sh")


@pytest.fixture
def real(tmp_path):
    """take() and drop() on temporary paths, each holder reaped afterwards."""
    procs = []

    def spawn(argv):
        procs.append(mod.start_holder(argv))
        return procs[-1]

    def take(token, wait=2, max_age=60):
        return mod.take(token, WHO.replace("ops", token), "ct200", wait, max_age, lock=str(tmp_path / "lock"),
                        owner=str(tmp_path / "owner"), prefix=str(tmp_path / "token-"), spawn=spawn, interval=0.1)

    def drop(token):
        return mod.drop(str(tmp_path / ("token-" + token)))
    yield take, drop, tmp_path / "lock", procs
    for path in tmp_path.glob("token-*"):
        path.unlink()
    for proc in procs:
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@needs_tools
def test_two_holders_exclude_each_other_and_dropping_the_token_frees_the_lock(real):
    take, drop, lock, procs = real
    first = take("first")
    assert first.held and first.changed and first.msg == ""
    assert first.holder.startswith("first from first@ctl") and first.holder.endswith("on ct200")
    assert first.pid and locked(lock)
    second = take("second", wait=1)
    assert not second.held and second.seconds >= 1
    assert second.msg == mod.held_message("ct200", first.holder, str(lock.parent / "token-"))
    assert not (lock.parent / "token-second").exists()
    assert until(lambda: procs[1].poll() is not None)   # its holder gave up, the first still holds the lock
    assert locked(lock) and procs[0].poll() is None
    assert drop("first") is True and drop("first") is False
    assert until(lambda: not locked(lock)) and until(lambda: procs[0].poll() is not None)


@needs_tools
def test_a_run_that_waits_takes_the_lock_when_the_first_drops_its_token(real):
    take, drop, lock, procs = real
    assert take("first").held
    threading.Timer(1.0, drop, ["first"]).start()
    second = take("second", wait=10)
    assert second.held and second.changed and 1.0 <= second.seconds < 10
    assert second.holder.startswith("second from second@ctl")
    assert procs[0].poll() is not None               # the first holder ended with its token
    drop("second")
    assert until(lambda: not locked(lock))


@needs_tools
def test_a_run_that_died_frees_the_lock_after_max_age(real):
    take, drop, lock, procs = real
    assert take("died", wait=0, max_age=2).held       # its token is never dropped
    assert locked(lock)
    assert until(lambda: not locked(lock), 8) and until(lambda: procs[0].poll() is not None)
    assert (lock.parent / "token-died").exists()


@needs_tools
def test_the_holder_is_detached_from_the_caller(real):
    take, drop, lock, procs = real
    assert take("first").held
    pid = procs[0].pid
    assert os.getsid(pid) == pid != os.getsid(0)     # a session of its own: no hangup from the caller's
    fds = {int(fd): os.readlink("/proc/%d/fd/%s" % (pid, fd)) for fd in os.listdir("/proc/%d/fd" % pid)}
    assert fds == {0: "/dev/null", 1: "/dev/null", 2: "/dev/null"}
    assert os.readlink("/proc/%d/cwd" % pid) == "/"
    with open("/proc/%d/environ" % pid, "rb") as fh:
        assert fh.read().split(b"\0")[:-1] == [b"PATH=/usr/sbin:/usr/bin:/sbin:/bin"]
    drop("first")
