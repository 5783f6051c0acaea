"""host/layout.py (layout_info): who controls the directories root is about to write, read before any change.

Each refusal is one line naming the path. Ownership needs root to set up (chown); as another user
those cases are skipped.
"""
from __future__ import annotations

import os

import pytest
from ansible_collections.dflash.deploy.plugins.module_utils.host import layout as L

NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")


def read(tmp_path, path_env="/usr/bin:/bin", **request):
    """The reading as layout_info returns it; ``path_env`` is root's PATH, ``keep`` as the role passes it."""
    request.setdefault("service_user", "nobody")
    request.setdefault("service_group", "nogroup")
    keep = [L.Keep(path=k["path"], group=k["group"], mode=L.parse_mode(k["mode"])) for k in request.pop("keep", [])]
    out = L.read_layout(keep=keep, path_env=path_env, **request).as_dict()
    assert all("\n" not in p for p in out["problems"])
    return out


@pytest.fixture
def layout(tmp_path):
    """A layout under a root-owned, 0755 temporary tree: base, state and cache dirs."""
    os.chmod(tmp_path, 0o755)
    for parent in [tmp_path, *tmp_path.parents]:
        if parent.stat().st_mode & 0o002 and not parent.stat().st_mode & 0o1000:
            pytest.skip(f"{parent} is writable by others: the tree above the test is not root's")
    base, state, cache = tmp_path / "opt", tmp_path / "lib", tmp_path / "cache"
    for d in (base, base / "instances", base / "releases", state, cache):
        d.mkdir()
    return base, state, cache


def request_for(base, state, cache, name="qwen"):
    return {"root_dirs": [str(base), str(base / "instances"), str(base / "instances" / name)],
            "service_parents": [str(state), str(cache)],
            "shared_dirs": [str(base / "releases")], "release_dirs": [str(base / "releases")],
            "service_dirs": [str(state / name), str(cache / name)]}


@as_root
def test_a_sound_layout_and_a_fresh_one_have_no_problems(layout, tmp_path):
    base, state, cache = layout
    (state / "qwen").mkdir()
    os.chown(state / "qwen", NOBODY, -1)
    assert read(tmp_path, **request_for(base, state, cache)) == {"problems": [], "loose": [], "unkept": []}
    assert read(tmp_path, **request_for(tmp_path / "none", tmp_path / "no2", tmp_path / "no3"))["problems"] == []


@as_root
@pytest.mark.parametrize("where", ["state", "cache"])
def test_an_instance_directory_that_is_a_symlink_is_refused_naming_it(layout, tmp_path, where):
    base, state, cache = layout
    canary = tmp_path / "canary"
    canary.mkdir()
    link = (state if where == "state" else cache) / "qwen"
    link.symlink_to(canary)
    os.lchown(link, NOBODY, -1)
    problems = read(tmp_path, **request_for(base, state, cache))["problems"]
    assert problems == [f"host layout: {link} is a symlink (-> {canary}) made by nobody: root would follow it and "
                        "hand its target to the service user; remove it and check what it points at"]


@as_root
def test_a_symlink_planted_for_an_instance_not_yet_deployed_is_refused(layout, tmp_path):
    base, state, cache = layout
    (state / "future").symlink_to("/etc")
    problems = read(tmp_path, **request_for(base, state, cache, name="future"))["problems"]
    assert len(problems) == 1 and problems[0].startswith(f"host layout: {state / 'future'} is a symlink (-> /etc)")


@as_root
def test_a_layout_directory_someone_else_owns_is_refused(layout, tmp_path):
    base, state, cache = layout
    os.chown(base, NOBODY, -1)
    os.chown(base / "instances", NOBODY, -1)
    problems = read(tmp_path, **request_for(base, state, cache))["problems"]
    assert problems == [
        f"host layout: {base} is owned by nobody, not root: someone else may have changed what it holds; check it, "
        "then chown root:root it",
        f"host layout: {base / 'instances'} is owned by nobody, not root: someone else may have changed what it "
        "holds; check it, then chown root:root it"]


@as_root
def test_a_symlink_root_made_is_followed_one_someone_else_made_is_not(layout, tmp_path):
    base, state, cache = layout
    real = tmp_path / "data-lib"
    real.mkdir()
    state.rmdir()
    state.symlink_to(real)  # an operator's move to a bigger disk
    assert read(tmp_path, **request_for(base, state, cache))["problems"] == []
    os.lchown(state, NOBODY, -1)
    problems = read(tmp_path, **request_for(base, state, cache))["problems"]
    assert problems[0] == (f"host layout: {state} is a symlink (-> {real}) made by nobody: root would follow it; "
                           "remove it and check what it points at")


@as_root
def test_a_loosened_mode_of_roots_own_directory_is_left_to_be_put_back(layout, tmp_path):
    """Modes of root's directories are corrected by the role (not refused); shared ones come back as loose."""
    base, state, cache = layout
    os.chmod(base, 0o777)
    os.chmod(base / "releases", 0o777)
    (base / "releases" / "a518352da3e2603b").mkdir()
    os.chmod(base / "releases" / "a518352da3e2603b", 0o777)
    out = read(tmp_path, **request_for(base, state, cache))
    assert out == {"problems": [], "loose": [str(base / "releases"), str(base / "releases" / "a518352da3e2603b")],
                   "unkept": []}


@as_root
def test_a_release_that_is_a_symlink_or_not_roots_is_refused(layout, tmp_path):
    base, state, cache = layout
    evil = tmp_path / "evil"
    evil.mkdir()
    (base / "releases" / "a518352da3e2603b").symlink_to(evil)
    (base / "releases" / "b0").mkdir()
    os.chown(base / "releases" / "b0", NOBODY, -1)
    problems = read(tmp_path, **request_for(base, state, cache))["problems"]
    assert problems == [
        f"host layout: {base / 'releases' / 'a518352da3e2603b'} is a symlink (-> {evil}): a release is a directory "
        "that root built; remove the link",
        f"host layout: {base / 'releases' / 'b0'} is owned by nobody, not root: its code may have been changed; "
        "remove the release"]


@as_root
def test_a_directory_above_the_layout_that_others_may_write_is_refused(tmp_path):
    os.chmod(tmp_path, 0o755)
    top = tmp_path / "opt"
    top.mkdir()
    os.chmod(top, 0o777)
    problems = read(tmp_path, root_dirs=[str(top / "dflash")])["problems"]
    assert problems == [f"host layout: {top} is writable by others (mode 0777): whoever can write it can replace "
                        "what is below it; chmod go-w it"]
    os.chmod(top, 0o1777)  # sticky, as /tmp: others cannot replace root's entries
    assert read(tmp_path, root_dirs=[str(top / "dflash")])["problems"] == []


@as_root
def test_a_directory_on_roots_path_that_the_service_user_owns_is_refused(tmp_path):
    os.chmod(tmp_path, 0o755)
    sbin = tmp_path / "sbin"
    sbin.mkdir()
    os.chown(sbin, NOBODY, -1)
    problems = read(tmp_path, path_env=f"{sbin}:/usr/bin", root_dirs=[])["problems"]
    assert problems == [f"host layout: {sbin} is owned by nobody, not root: whoever owns it can replace what is "
                        "below it; chown root:root it (on root's PATH: a command root runs by name could be replaced)"]


@as_root
def test_an_instance_directory_that_is_a_file_or_foreign_is_refused(layout, tmp_path):
    base, state, cache = layout
    (state / "qwen").write_text("x")
    (cache / "qwen").mkdir()
    os.chown(cache / "qwen", 12345, -1)
    problems = read(tmp_path, **request_for(base, state, cache))["problems"]
    assert problems == [f"host layout: {state / 'qwen'} is not a directory: move it away",
                        f"host layout: {cache / 'qwen'} is owned by uid 12345, not the service user or root: "
                        "move it away"]


@as_root
def test_state_and_cache_parents_the_service_user_owns_are_taken_back_not_refused(layout, tmp_path):
    """Earlier versions left /var/lib/dflash and /var/cache/dflash to the service user: accepted (the
    role makes them root's), once the instance directories in them are checked; another owner is refused."""
    base, state, cache = layout
    os.chown(state, NOBODY, -1)
    os.chown(cache, 12345, -1)
    problems = read(tmp_path, **request_for(base, state, cache))["problems"]
    assert problems == [f"host layout: {cache} is owned by uid 12345, not root: someone else may have changed what "
                        "it holds; check it, then chown root:root it"]


@as_root
def test_only_the_directories_not_as_the_role_keeps_them_are_put_back(layout, tmp_path):
    """A re-run touches only what differs: missing, another owner, group or mode, a file in its place."""
    base, state, cache = layout
    os.chmod(base, 0o755)
    os.chmod(base / "instances", 0o755)
    os.chmod(base / "releases", 0o700)
    os.chown(state, 0, 65534)
    (tmp_path / "file").write_text("")
    keep = [{"path": str(base), "group": "root", "mode": "0755"},                 # as kept
            {"path": str(base / "instances"), "group": "root", "mode": "0750"},   # another mode
            {"path": str(base / "releases"), "group": "root", "mode": "0755"},    # loosened the other way
            {"path": str(state), "group": "root", "mode": "0755"},                # another group
            {"path": str(tmp_path / "missing"), "group": "root", "mode": "0755"},
            {"path": str(tmp_path / "file"), "group": "root", "mode": "0644"},
            {"path": str(cache), "group": "no-such-group-here", "mode": "0755"}]  # its group not made yet
    out = read(tmp_path, keep=keep)
    assert out["unkept"] == [str(base / "instances"), str(base / "releases"), str(state), str(tmp_path / "missing"),
                             str(tmp_path / "file"), str(cache)]
    os.chmod(state, 0o755)
    os.chown(state, 0, 0)
    assert read(tmp_path, keep=[keep[0], keep[3]])["unkept"] == []


@as_root
def test_a_staged_model_directory_is_roots_with_roots_parents(layout, tmp_path):
    # root copies the weights into model_path: neither it nor a directory above it may be someone else's.
    base, state, cache = layout
    models = tmp_path / "models"
    models.mkdir()
    (models / "own").mkdir()
    request = request_for(base, state, cache)
    assert read(tmp_path, **request, staged_dirs=[str(models / "own"), str(models / "new")])["problems"] == []
    os.chown(models / "own", NOBODY, -1)
    (models / "link").symlink_to(tmp_path / "canary-not-made")
    os.lchown(models / "link", NOBODY, -1)
    problems = read(tmp_path, **request, staged_dirs=[str(models / "own"), str(models / "link")])["problems"]
    assert problems == [
        f"host layout: {models / 'own'} is owned by nobody, not root: someone else may have changed what it holds; "
        "check it, then chown root:root it",
        f"host layout: {models / 'link'} is a symlink (-> {tmp_path / 'canary-not-made'}) made by nobody: root would "
        "follow it; remove it and check what it points at"]
    os.chown(models, NOBODY, -1)
    problems = read(tmp_path, **request, staged_dirs=[str(models / "new")])["problems"]
    assert problems == [f"host layout: {models} is owned by nobody, not root: whoever owns it can replace what is "
                        "below it; chown root:root it"]


def test_a_kept_mode_is_octal_text_or_a_number():
    assert L.parse_mode("0755") == 0o755 and L.parse_mode("750") == 0o750 and L.parse_mode(0o700) == 0o700
    for bad in ("u=rwx", "0958", True):
        with pytest.raises(ValueError, match="is not an octal mode"):
            L.parse_mode(bad)


@as_root
def test_a_release_holding_a_file_someone_else_owns_or_may_write_is_refused_not_loosened(tmp_path):
    """Round 3's N4: a release left 0777 with another user's bin/python in it. The first entry that is not
    root's alone is named and the release refused (removed and built again), never 'put back' and used."""
    os.chmod(tmp_path, 0o755)
    releases = tmp_path / "releases"
    release = releases / "r1"
    (release / "bin").mkdir(parents=True)
    (release / "lib").mkdir()
    (release / "lib" / "mod.py").write_text("x = 1\n")
    python = release / "bin" / "python"
    python.symlink_to("/usr/bin/python3")
    (release / ".lock").write_text("")
    (release / ".lock").chmod(0o666)  # uv's venv lock, as uv leaves it
    assert read(tmp_path, release_dirs=[str(releases)])["problems"] == []
    release.chmod(0o777)
    assert read(tmp_path, release_dirs=[str(releases)]) == {"problems": [], "loose": [str(release)], "unkept": []}
    python.unlink()
    python.write_text("#!/bin/sh\nid > /tmp/pwned\n")
    os.chown(python, NOBODY, NOBODY)
    got = read(tmp_path, release_dirs=[str(releases)])
    assert got["problems"] == [f"host layout: {release} holds {python}, owned by nobody: root would run code "
                               "someone else may have changed; remove the release (a deploy builds it again)"]
    assert got["loose"] == []
    os.chown(python, 0, 0)
    (release / "lib" / ".lock").write_text("")
    (release / "lib" / ".lock").chmod(0o666)  # not uv's: a file others may write
    assert read(tmp_path, release_dirs=[str(releases)])["problems"] == [
        f"host layout: {release} holds {release / 'lib' / '.lock'}, writable by others (mode 0666): root would run "
        "code someone else may have changed; remove the release (a deploy builds it again)"]
    (release / "lib" / ".lock").unlink()
    (release / "lib").chmod(0o777)
    assert read(tmp_path, release_dirs=[str(releases)])["problems"] == [
        f"host layout: {release} holds {release / 'lib'}, writable by others (mode 0777): root would run code "
        "someone else may have changed; remove the release (a deploy builds it again)"]


@as_root
def test_the_directories_above_a_path_are_checked_not_the_path_itself(tmp_path):
    """parents_of (the first read of every entry point): /opt made 0777 is refused; the unit file itself,
    or a missing base, is not read."""
    os.chmod(tmp_path, 0o755)
    opt = tmp_path / "opt"
    opt.mkdir()
    assert read(tmp_path, parents_of=[str(opt / "dflash"), str(tmp_path / "etc" / "unit.service")])["problems"] == []
    opt.chmod(0o777)
    assert read(tmp_path, parents_of=[str(opt / "dflash")])["problems"] == [
        f"host layout: {opt} is writable by others (mode 0777): whoever can write it can replace what is below it; "
        "chmod go-w it"]


@as_root
def test_what_is_above_a_root_made_links_target_counts_as_above_the_link(layout, tmp_path):
    """Round 3's M7: /opt/dflash -> /data/dflash with /data another user's: that user could swap /data/dflash."""
    base, state, cache = layout
    data = tmp_path / "data"
    (data / "lib").mkdir(parents=True)
    state.rmdir()
    state.symlink_to(data / "lib")  # root's link to a bigger disk
    assert read(tmp_path, **request_for(base, state, cache))["problems"] == []
    os.chown(data, NOBODY, -1)
    assert read(tmp_path, **request_for(base, state, cache))["problems"] == [
        f"host layout: {data} is owned by nobody, not root: whoever owns it can replace what is below it; "
        "chown root:root it"]


@as_root
def test_a_model_staged_inside_an_instances_own_directory_is_refused(layout, tmp_path):
    """Round 3's M7: model_path below /var/lib/dflash/<instance> (the service user's) with model_controller_dir:
    refused before any change, naming the directory, instead of staged where the service user may swap it."""
    base, state, cache = layout
    (state / "qwen").mkdir()
    os.chown(state / "qwen", NOBODY, -1)
    model = state / "qwen" / "models" / "m"
    req = dict(request_for(base, state, cache), staged_dirs=[str(model)])
    assert read(tmp_path, **req)["problems"] == [
        f"host layout: {model} is inside {state / 'qwen'}, which the service user owns: root would write the weights "
        "where it can replace them; stage the model outside the instance's own directories"]
