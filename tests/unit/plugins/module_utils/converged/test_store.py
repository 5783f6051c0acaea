"""Where the fast path's record may live (module_utils/converged/store.py, round 3 M6)."""
from __future__ import annotations

import pytest
from ansible_collections.dflash.deploy.plugins.module_utils.converged import store as S


@pytest.mark.parametrize("path", ["/var/lib/dflash-deploy/converged.json", "/var/lib/dflash-deploy/other.json",
                                  "/var/lib/dflash-deploy//converged.json"])
def test_a_file_in_the_collections_own_directory_may_be_the_record(path):
    assert S.path_error(path) is None


@pytest.mark.parametrize("path", ["/var/lib/rt3-converged.json", "/var/lib/dflash-deploy/sub/converged.json",
                                  "var/lib/dflash-deploy/converged.json", "/var/lib/dflash-deploy/../x.json",
                                  "/var/lib/dflash-deploy", "/var/lib/dflash-deploy/", "/var/lib/dflash-deploy/.x",
                                  "/etc/converged.json", ""])
def test_any_other_path_is_refused_in_one_line(path):
    error = S.path_error(path)
    assert error.startswith("deploy_state_file %s: the record must be a file directly in /var/lib/dflash-deploy"
                            % path) and "\n" not in error
