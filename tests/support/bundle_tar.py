"""A small uncompressed tar shaped like a transplant bundle (a payload member, then MANIFEST.json last), for the
bundle_push tests; its manifest digest is what `tar -xOf <tar> MANIFEST.json | sha256sum` prints."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from pathlib import Path


def make_bundle(path: Path, manifest: bytes = b'{"format": "dflash-transplant-bundle"}\n', payload: int = 300_000,
                extra: tuple[tuple[str, bytes], ...] = ()) -> str:
    """Write the tar at ``path`` (``extra`` members between the payload and the manifest); its manifest digest."""
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in (("site-packages/torch/lib/libtorch.so", os.urandom(payload)),) + extra + (
                ("MANIFEST.json", manifest),):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return hashlib.sha256(manifest).hexdigest()
