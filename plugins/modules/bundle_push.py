#!/usr/bin/python
# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: bundle_push
short_description: Push a multi-GB tar bundle to a host, identified by its manifest digest, with no whole-file checksum
version_added: "0.1.0"
description:
  - Puts the controller's uncompressed tar bundle O(src) at O(dest) on the host in as few round trips as
    Ansible allows, for a bundle whose identity is the sha256 of its C(MANIFEST.json) member (O(manifest_sha256),
    what C(tar -xOf <bundle> MANIFEST.json | sha256sum) prints).
  - An action plugin does the work on the controller. It first runs this module on the host, which reads the
    manifest digest of what O(dest) holds (the tar's headers and its C(MANIFEST.json), never the whole file).
    When that is O(manifest_sha256) nothing is transferred; the module only applies O(owner), O(group) and
    O(mode) where they differ.
  - Otherwise the action makes Ansible's remote temporary directory and puts O(src) there (see O(transfer)),
    grants a become user access the standard way, and runs this
    module once more (with become as the task says). It checks that the received file has the controller's
    size and that its C(MANIFEST.json) has the sha256 O(manifest_sha256); a file that fails either check is
    refused in one line and O(dest) is left as it was. Then it sets O(owner), O(group) and O(mode) on the
    received file and renames it over O(dest), an atomic replacement. When the temporary directory lies on
    another filesystem than O(dest), the file is first copied to a temporary file in O(dest)'s directory, which
    is then renamed. The action removes the temporary directory.
  - On a C(local) connection (as root, or without become) there is no temporary directory and no transfer; the
    second run checks the controller's O(src) itself and copies it into a temporary file in O(dest)'s
    directory, which is then renamed over O(dest); O(src) stays where it is. One copy of the bytes, where the
    connection's own file copy into the temporary directory and a copy across filesystems after it were two.
  - No whole-file checksum is computed on either side (C(ansible.builtin.copy) computes two SHA-1 passes, about
    16 s for a 4.7 GB bundle). The transfer's integrity rests on the SSH transport's MAC, the size check and the
    manifest digest; every member's size and sha256 is verified by
    M(dflash.deploy.site_packages_transplant) whenever it uses the bundle, so a damaged member is refused there,
    never installed.
  - Standard library only on the host.
author:
  - dflash.deploy contributors (@dflash)
options:
  src:
    description:
      - The bundle on the controller, an uncompressed tar with a C(MANIFEST.json) member. A relative path is
        looked up like C(ansible.builtin.copy)'s (the role's C(files/), then the playbook's).
      - The action plugin hands the module the path of the received file on the host instead (on a local
        connection, the controller's O(src) itself, with O(keep_src)).
    type: path
    required: true
  dest:
    description:
      - Where the bundle goes on the host. Its directory must exist. A file there whose manifest digest is not
        O(manifest_sha256) (or that is no bundle) is replaced.
    type: path
    required: true
  manifest_sha256:
    description:
      - The sha256 (64 lowercase hex digits) of O(src)'s C(MANIFEST.json) member, as the controller read it.
        The received file must carry the same; O(dest) carrying it already means nothing is transferred.
    type: str
    required: true
  owner:
    description: The owner of O(dest) (a name or a uid). Left out, the user the module runs as.
    type: str
  group:
    description: The group of O(dest) (a name or a gid). Left out, that user's group.
    type: str
  mode:
    description:
      - The permissions of O(dest), in octal (V('0644') or V(0o644) as a number). Symbolic modes are not taken.
    type: raw
    default: '0644'
  size:
    description:
      - The size in bytes of the controller's O(src), which the received file must have. Set by the action
        plugin, not by a task (a value given there is replaced).
      - Without it the module only compares O(dest) with O(manifest_sha256), applying O(owner), O(group) and
        O(mode) when they are the same, and reads nothing at O(src). This is the action's first call.
    type: int
  keep_src:
    description:
      - Copy O(src) beside O(dest) and leave it, instead of renaming it into place. Set by the action plugin on a
        local connection, where O(src) is the controller's own file, not by a task.
    type: bool
    default: false
  transfer:
    description:
      - How the bundle reaches the remote temporary directory.
      - V(auto), on the C(ssh) connection without a password, streams it through one C(ssh <host> 'cat > <file>')
        built from the connection's own command line (its options, user, key and multiplexed master), with the
        bundle file as ssh's standard input, read from disk as it is sent. On a C(local) connection (as root, or
        without become) the module copies O(src) into place itself (see O(keep_src)). On any other connection, or
        with a password, it is V(put_file).
      - V(put_file) is the connection's own file transfer (C(sftp) or C(scp) over SSH, a file copy on a local
        connection), the way Ansible's modules transfer files.
      - Read by the action plugin; the module ignores it.
    type: str
    choices: [auto, put_file]
    default: auto
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
attributes:
  action:
    support: full
  async:
    support: none
  bypass_host_loop:
    support: none
  check_mode:
    support: full
    description: Transfers nothing; C(changed) says whether O(dest) would be replaced (or its attributes changed).
  diff_mode:
    support: full
    description: The manifest digest of O(dest) before and after.
  platform:
    support: full
    platforms: posix
requirements:
  - Python 3.8 to 3.13 on the managed host (the versions the collection's sanity tests compile and import on).
notes:
  - The received file is not synced to disk before the rename. After a crash O(dest) may be short or empty; its
    manifest digest then differs (or cannot be read) and the next run pushes it again.
  - Between the transfer and the module's checks the received file sits in Ansible's remote temporary directory
    (C(remote_tmp)), which needs room for the whole bundle. With O(dest) on another filesystem, O(dest)'s
    directory needs room for a second copy until the rename.
seealso:
  - module: ansible.builtin.copy
    description: The general file copy, which checksums the whole file on both sides.
  - module: dflash.deploy.site_packages_transplant
    description: Verifies every member of the bundle whenever it transplants from it.
"""

EXAMPLES = r"""
- name: Push the bundle
  dflash.deploy.bundle_push:
    src: /srv/dflash/artifacts/cuda-cu130.tar
    dest: /opt/dflash/artifacts/cuda-cu130.tar
    manifest_sha256: "{{ cuda_overlay_release_input.manifest_sha256 }}"
    owner: root
    group: root
    mode: "0644"

- name: Push it on its own uncompressed SSH connection, as cuda_overlay does
  vars:
    ansible_ssh_args: "-o Compression=no"
  dflash.deploy.bundle_push:
    src: "{{ bundle_on_controller }}"
    dest: /opt/dflash/artifacts/cuda-cu130.tar
    manifest_sha256: "{{ bundle_manifest_sha256 }}"
"""

RETURN = r"""
dest:
  description: O(dest).
  returned: always
  type: str
  sample: /opt/dflash/artifacts/cuda-cu130.tar
manifest_sha256:
  description: The manifest digest O(dest) carries now (in check mode, would carry).
  returned: success
  type: str
  sample: 4c1f0b5e0e7f3f0d9b8b1f0b0a3c3e8a5d1f7e2a9c4b6d8e0f1a2b3c4d5e6f70
before_manifest_sha256:
  description: The manifest digest O(dest) carried before; null when there was no file, or none a digest could be
    read from.
  returned: always
  type: str
  sample: null
transferred:
  description: Whether the bundle was transferred to the host (false when O(dest) already carried O(manifest_sha256),
    and in check mode).
  returned: always
  type: bool
  sample: true
size:
  description: The bundle's size in bytes (the received file's, the controller's).
  returned: when transferred
  type: int
  sample: 4700000000
transfer:
  description: How the bundle was transferred, V(ssh_stream) (one C(ssh ... 'cat > file')), V(put_file) (the
    connection's own file transfer) or V(local_copy) (a local connection - the module copied the controller's file
    into place). See O(transfer).
  returned: when transferred
  type: str
  sample: ssh_stream
placed:
  description: How the received file reached O(dest), V(rename) (same filesystem) or V(copy) (copied beside
    O(dest), then renamed).
  returned: when transferred
  type: str
  sample: rename
"""

import traceback

from ansible.module_utils.basic import AnsibleModule

try:
    from ansible_collections.dflash.deploy.plugins.module_utils import bundle_push as BP
    IMPORT_ERROR = None
except ImportError:
    IMPORT_ERROR = traceback.format_exc()


def _diff(before, after):
    return {"before": "manifest_sha256: %s\n" % (before or "none"), "after": "manifest_sha256: %s\n" % after}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            src=dict(type="path", required=True),
            dest=dict(type="path", required=True),
            manifest_sha256=dict(type="str", required=True),
            owner=dict(type="str"),
            group=dict(type="str"),
            mode=dict(type="raw", default="0644"),
            size=dict(type="int"),
            transfer=dict(type="str", default="auto", choices=["auto", "put_file"]),
            keep_src=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    if IMPORT_ERROR:
        module.fail_json(msg="dflash.deploy module_utils could not be imported", exception=IMPORT_ERROR)
    p = module.params
    dest = p["dest"]
    want = p["manifest_sha256"]
    result = dict(changed=False, dest=dest, transferred=False)

    def fail(msg):
        module.fail_json(msg="bundle_push: %s" % msg, **result)

    if len(want) != 64 or any(c not in "0123456789abcdef" for c in want):
        fail("manifest_sha256 %r is not 64 lowercase hex digits" % want)
    try:
        mode = BP.parse_mode(p["mode"])
        uid, gid = BP.resolve_ids(p["owner"], p["group"])
    except (ValueError, BP.PushError) as exc:
        fail(str(exc))

    before = BP.current_digest(dest)
    result["before_manifest_sha256"] = before
    diff = _diff(before, want)

    if before == want:
        result["manifest_sha256"] = want
        try:
            if BP.attributes_differ(dest, uid, gid, mode):
                result["changed"] = True
                if not module.check_mode:
                    BP.apply_attributes(dest, uid, gid, mode)
        except OSError as exc:
            fail("%s: %s" % (dest, exc.strerror or exc))
        module.exit_json(**result)

    if p["size"] is None:  # the action's first call: dest is not the bundle; nothing is read at src
        result.update(changed=True, manifest_sha256=want)
        if module._diff:
            result["diff"] = diff
        module.exit_json(**result)

    src = p["src"]
    refused = BP.check_received(src, p["size"], want)
    if refused:
        fail("%s; %s left as it was" % (refused, dest))
    result.update(size=p["size"], manifest_sha256=want, changed=True)
    if module._diff:
        result["diff"] = diff
    if module.check_mode:
        module.exit_json(**result)
    try:
        result["placed"] = BP.place(src, dest, uid, gid, mode, keep_src=p["keep_src"])
    except BP.PushError as exc:
        fail("%s; %s left as it was" % (exc, dest))
    except OSError as exc:
        fail("placing the received bundle at %s: %s; %s left as it was"
             % (dest, exc.strerror or exc, dest))
    result["transferred"] = True
    module.exit_json(**result)


if __name__ == "__main__":
    main()
