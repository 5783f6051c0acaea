"""pydist/record.py: RECORD parsing, path validation, hashing, verification."""

from __future__ import annotations

import pytest
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.record import (
    RecordError,
    format_record,
    hash_bytes,
    hash_file,
    hex_to_record_hash,
    normalize_record_path,
    parse_record,
    record_hash_to_hex,
)


@pytest.mark.parametrize("raw,want", [
    ("torch/__init__.py", "torch/__init__.py"),
    ("./torch//lib/x.so", "torch/lib/x.so"),
    ("torch/sub/../x.py", "torch/x.py"),
    ("../../../bin/torchrun", "../../../bin/torchrun"),
    ("nvidia/cu13/lib/libcudart.so.13", "nvidia/cu13/lib/libcudart.so.13"),
    # wheel data scheme: real sympy installs ../../../share/man/man1/isympy.1
    ("../../../share/man/man1/isympy.1", "../../../share/man/man1/isympy.1"),
    ("../../../share/jupyter/x.json", "../../../share/jupyter/x.json"),
    ("../../../include/site/python3.12/greenlet/greenlet.h", "../../../include/site/python3.12/greenlet/greenlet.h"),
    ("../../../etc/jupyter/x.json", "../../../etc/jupyter/x.json"),
])
def test_valid_paths(raw, want):
    assert normalize_record_path(raw) == want


@pytest.mark.parametrize("raw", [
    "", "/etc/passwd", "../x.py", "../../lib/evil.py", "../../../bin/sub/x",
    "torch/../../outside.py", "../../../bin/", ".", "a\x00b", "C:/windows", "a\\..\\b",
    "../../../../bin/x", "../../../../../etc/cron.d/x", "../../../share", "../../../lib/python3.12/x.py",
])
def test_refused_paths(raw):
    with pytest.raises(RecordError):
        normalize_record_path(raw)


def test_parse_and_format_roundtrip():
    text = ('torch/__init__.py,sha256=AAAA,10\n"torch/a,b.py",sha256=BBBB,3\n'
            "../../../bin/torchrun,sha256=CCCC,50\ntorch-2.dist-info/RECORD,,\n")
    entries = parse_record(text)
    assert [e.path for e in entries] == ["torch/__init__.py", "torch/a,b.py", "../../../bin/torchrun",
                                         "torch-2.dist-info/RECORD"]
    assert entries[0].size == 10 and entries[3].hash is None and entries[3].size is None
    assert entries[2].is_script and not entries[0].is_script
    assert parse_record(format_record(entries)) == entries


@pytest.mark.parametrize("text", [
    "torch/__init__.py,sha256=AAAA,10\ntorch/.hidden/x.py,,\n\n  \nlast,sha256=B,2",
    "torch/__init__.py,sha256=AAAA,10\r\ntorch/b.py,,\r\n",
    '"torch/a,b.py",sha256=BBBB,3\nx/./y.py,sha256=C,1\n',
])
def test_fast_paths_match_csv(text):
    """The unquoted fast paths of parse_record and format_record give what the csv module gives."""
    import csv
    import io

    rows = [r for r in csv.reader(io.StringIO(text)) if r and not (len(r) == 1 and not r[0].strip())]
    entries = parse_record(text)
    assert [e.path for e in entries] == [normalize_record_path(r[0]) for r in rows]
    assert [(e.hash or "", "" if e.size is None else str(e.size)) for e in entries] == \
        [(r[1] if len(r) > 1 else "", r[2] if len(r) > 2 else "") for r in rows]
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows((e.path, e.hash or "", "" if e.size is None else e.size)
                                                   for e in entries)
    assert format_record(entries) == out.getvalue()


@pytest.mark.parametrize("text", [
    "a.py,sha256=x,1\na.py,sha256=x,1\n",  # duplicate
    "a.py,nohash,1\n",
    "a.py,sha256=x,notanumber\n",
    "a.py,sha256=x,1,extra\n",
    "/abs.py,sha256=x,1\n",
    "../../escape.py,sha256=x,1\n",
])
def test_parse_refuses(text):
    with pytest.raises(RecordError):
        parse_record(text)


def test_hash_helpers(tmp_path):
    data = b"hello world\n" * 1000
    path = tmp_path / "f"
    path.write_bytes(data)
    value = hash_bytes(data)
    assert value.startswith("sha256=") and "=" not in value[len("sha256="):]
    assert hash_file(str(path)) == (value, len(data))
    algo, hex_digest = record_hash_to_hex(value)
    assert algo == "sha256" and hex_to_record_hash(hex_digest) == value
