# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tools/galaxy_import.py's own decisions: the copy that names a repository changes nothing else, and the
importer's result is refused when it lacks a shipped module, role or filter or finds one undocumented."""
from __future__ import annotations

import importlib.util
import io
import json
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("dflash_galaxy_import_tool", REPO / "tools" / "galaxy_import.py")
tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tool)


def _tarball(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return path


def _read(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}


def test_the_copy_names_the_repository_and_changes_no_other_member(tmp_path):
    manifest = {"collection_info": {"namespace": "dflash", "name": "deploy", "repository": None}, "format": 1}
    members = {"MANIFEST.json": json.dumps(manifest).encode(), "FILES.json": b'{"files": []}',
               "roles/a/tasks/main.yml": b"---\n[]\n"}
    (tmp_path / "out").mkdir()
    copy = tool.with_repository(_tarball(tmp_path / "c.tar.gz", members), "https://x.invalid/r", tmp_path / "out")
    got = _read(copy)
    assert json.loads(got.pop("MANIFEST.json"))["collection_info"] == {
        "namespace": "dflash", "name": "deploy", "repository": "https://x.invalid/r"}
    members.pop("MANIFEST.json")
    assert got == members


WANT = {"module": {"pkg_probe", "abi_check"}, "role": {"rollout"}, "filter": {"switched", "failure_message"}}


def _result(**undocumented):
    contents = [{"content_type": kind, "name": name, "description": f"what {name} does"}
                for kind, names in WANT.items() for name in sorted(names)]
    contents.append({"content_type": "filter", "name": "failure", "description": None})  # a file of filters
    for kind, name in undocumented.items():
        contents = [c for c in contents if c["name"] != name] + [{"content_type": kind, "name": name}]
    return {"contents": contents}


def test_a_complete_result_passes_though_a_file_of_filters_has_no_description():
    assert tool.check_result(_result(), WANT) == []


def test_a_module_the_importer_did_not_find_is_named():
    result = _result()
    result["contents"] = [c for c in result["contents"] if c["name"] != "abi_check"]
    assert tool.check_result(result, WANT) == ["modules the importer did not find: abi_check"]


def test_a_filter_without_its_description_is_named():
    assert tool.check_result(_result(filter="switched"), WANT) == [
        "filter switched: the importer found no description"]
