"""A small uncompressed tar shaped like a transplant bundle (a payload member, then MANIFEST.json last), for the
bundle_push tests; its manifest digest is what `tar -xOf <tar> MANIFEST.json | sha256sum` prints."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from pathlib import Path


def manifest_bytes(**fields) -> bytes:
    """A manifest that transplant/bundle.py's Bundle opens (the bundle format, no distribution), plus ``fields``
    to tell two bundles apart."""
    return json.dumps({"format": "dflash-transplant-bundle", "version": 1, "source": {"venv": "/opt/reference/venv"},
                       "distributions": [], **fields}, sort_keys=True).encode() + b"\n"


def make_bundle(path: Path, manifest: bytes | None = None, payload: int = 300_000,
                extra: tuple[tuple[str, bytes], ...] = ()) -> str:
    """Write the tar at ``path`` (``extra`` members between the payload and the manifest, ``manifest_bytes()``
    unless another manifest is given); its manifest digest."""
    manifest = manifest_bytes() if manifest is None else manifest
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in (("site-packages/torch/lib/libtorch.so", os.urandom(payload)),) + extra + (
                ("MANIFEST.json", manifest),):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return hashlib.sha256(manifest).hexdigest()
