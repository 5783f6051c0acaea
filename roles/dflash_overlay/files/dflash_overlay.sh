#!/usr/bin/env bash
# Overlay a tar of sglang/... onto a site-packages directory, file by file.
# usage: dflash_overlay.sh TAR SITE_PACKAGES MANIFEST [VERIFIED_MARKER]
# DRY=1 reports without writing. One output line per file that differs:
#   add <path>      the release lacks it
#   replace <path>  the release has PyPI's version of it
#   drift <path>    it was overlaid before and has been edited since
# and "manifest" when the manifest of overlaid files was (or would be) rewritten.
# Files are written under a temporary name and renamed over (uv hardlinks venv
# files from its cache: an existing inode is never written to).
set -euo pipefail
tar_file=$1 site=$2 manifest=$3 marker=${4:-}
dry=${DRY:-0}
[[ -d $site ]] || { echo "site-packages $site does not exist" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/tree"
tar -xf "$tar_file" -C "$work/tree" --no-same-owner
declare -A previous=()
if [[ -f $manifest ]]; then
  while read -r sum path; do previous[$path]=$sum; done < "$manifest"
fi
(cd "$work/tree" && find . -type f ! -name '*.pyc' -printf '%P\n' | LC_ALL=C sort) > "$work/list"
: > "$work/manifest"
changed=0
while IFS= read -r rel; do
  want=$(sha256sum < "$work/tree/$rel" | cut -d' ' -f1)
  printf '%s  %s\n' "$want" "$rel" >> "$work/manifest"
  dest=$site/$rel
  if [[ -f $dest ]]; then
    have=$(sha256sum < "$dest" | cut -d' ' -f1)
    [[ $have == "$want" ]] && continue
    if [[ -n ${previous[$rel]:-} ]]; then kind=drift; else kind=replace; fi
  else
    kind=add
  fi
  echo "$kind $rel"
  changed=1
  if [[ $dry != 1 ]]; then
    mkdir -p "$(dirname "$dest")"
    cp "$work/tree/$rel" "$dest.dflash-new"
    chmod 0644 "$dest.dflash-new"
    mv -f "$dest.dflash-new" "$dest"
    if [[ $rel == *.py ]]; then
      rm -f "$(dirname "$dest")/__pycache__/$(basename "$rel" .py)".*.pyc
    fi
  fi
done < "$work/list"
if ! cmp -s "$work/manifest" "$manifest" 2>/dev/null; then
  echo manifest
  changed=1
  if [[ $dry != 1 ]]; then
    mkdir -p "$(dirname "$manifest")"
    cp "$work/manifest" "$manifest.dflash-new"
    chmod 0644 "$manifest.dflash-new"
    mv -f "$manifest.dflash-new" "$manifest"
  fi
fi
# A release whose files changed is verified again before anything runs it.
if [[ $changed == 1 && $dry != 1 && -n $marker ]]; then
  rm -f "$marker"
fi
