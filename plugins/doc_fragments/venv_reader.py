# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)


class ModuleDocFragment:
    """What pkg_probe and abi_check share: they read a venv on the GPU host and change nothing."""

    DOCUMENTATION = r"""
options:
  import_timeout:
    description: Seconds each import may take before it is reported as timed out.
    type: int
    default: 120
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    description: Reads only; the result is the same with and without check mode.
  diff_mode:
    support: none
    description: Nothing changes, so there is nothing to show.
  platform:
    support: full
    platforms: posix
    description: Runs on the Linux GPU host whose venv it reads.
requirements:
  - Python 3.8 to 3.13 on the managed host (the versions the collection's sanity tests compile and import on).
"""
