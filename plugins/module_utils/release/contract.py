# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The release contract: what a release directory holds besides its venv, named once.

Every release is ``<base_dir>/releases/<id>``; what the roles record about it lives in its
``.dflash-release/`` directory, which verification's fingerprint leaves out:

- ``lock.txt``: the hashed lock the release was synced from (sglang_venv);
- ``built.json``: written last by the build, so a directory without it is an interrupted build
  (sglang_venv, read by ``releases_info``);
- ``dflash-overlay.sha256``: the manifest of the DFlash tree put in place (``dflash_tree_overlay``);
- ``verified.json``: the verification marker (sglang_service, read by ``release_fingerprint``),
  removed by any role that changes the release;
- ``transplant.json``: what the last successful bundle transplant left in place (bundle, options,
  a digest of its files' lstat facts), so that a re-run answers from it (``site_packages_transplant``);
- ``perf-<instance>.json``: the performance gate's record of the release on one instance (its
  figures, the probe and the GPUs they were measured with: ``perf_probe``'s ``record``), written when
  the release was promoted on that instance; the baseline of the next release there;
- ``perf-<instance>.next.json``: the same record while the promotion is undecided (this run's other
  instances may still roll back); renamed to ``perf-<instance>.json`` once every restarted instance
  passed, removed otherwise.

The roles reach these paths through the ``release_file`` filter and the modules through this
module, so a rename is one edit here.
"""
from __future__ import annotations

import posixpath

META_DIR = ".dflash-release"
LOCK = "lock.txt"
BUILT = "built.json"
OVERLAY_MANIFEST = "dflash-overlay.sha256"
VERIFIED = "verified.json"
TRANSPLANT = "transplant.json"

PERF = "perf-{instance}.json"
PERF_CANDIDATE = "perf-{instance}.next.json"

FILES = {"lock": LOCK, "built": BUILT, "overlay_manifest": OVERLAY_MANIFEST, "verified": VERIFIED,
         "transplant": TRANSPLANT}
# Files kept per instance: their names take the instance's name (a unit instance name: letters,
# digits, '-' and '_', checked by the instance list's own filter before anything runs).
INSTANCE_FILES = {"perf": PERF, "perf_candidate": PERF_CANDIDATE}


def meta_dir(release_dir: str) -> str:
    """The release's ``.dflash-release`` directory."""
    return posixpath.join(release_dir, META_DIR)


def release_file(release_dir: str, name: str, instance: str = "") -> str:
    """The path of one of the release's recorded files, by its contract name (a key of FILES, or of
    INSTANCE_FILES with the ``instance`` it is kept for)."""
    if name in INSTANCE_FILES:
        if not instance or "/" in instance or instance.startswith("."):
            raise ValueError(f"the release file {name!r} is kept per instance: name the instance "
                             f"(not {instance!r})")
        return posixpath.join(release_dir, META_DIR, INSTANCE_FILES[name].format(instance=instance))
    if name not in FILES:
        known = sorted([*FILES, *INSTANCE_FILES])
        raise ValueError(f"no release file named {name!r}: one of {', '.join(known)}")
    if instance:
        raise ValueError(f"the release file {name!r} is one per release: it takes no instance")
    return posixpath.join(release_dir, META_DIR, FILES[name])
