"""An operator behind a proxy can deploy: the lab's index answers only its proxy, and dflash_proxy_env takes
uv there (issue 44 item 4).

The lab's package index (tools/lab/index_server.py, on the gateway) is told to answer its own gateway address
alone (the only-from file); a forward proxy on the gateway (tools/lab/proxy_server.py) is the one client that
address has, so ct200 reaches the index only through the proxy, as a host behind a company proxy does.

1. Without the proxy, the full path (`deploy_state_enabled=false`: the fast path would also ask the index, and
   fall to the full path) fails at the lock, rc 2, with a line naming the index and its refusal; nothing is
   switched or restarted.
2. With `dflash_proxy_env: {http_proxy: http://<gateway>:8632}`, the same deploy passes, and the proxy's log
   shows ct200's requests for the index's pages, answered 200. The proxy's address is in no record.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from conftest import REPO, VENV_BIN, ansible_env, lab

GATEWAY = lab.GATEWAY
INDEX = f"{GATEWAY}:{lab.INDEX_PORT}"
PROXY_PORT = 8632
CT200 = "10.89.64.200"


@pytest.fixture
def proxy(tmp_path):
    log = tmp_path / "proxy.log"
    proc = subprocess.Popen([sys.executable, str(REPO / "tools" / "lab" / "proxy_server.py"), "--bind", GATEWAY,
                             "--port", str(PROXY_PORT), "--allow", INDEX, "--log", str(log)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    only_from = lab.STATE / "index-only-from"
    only_from.write_text(GATEWAY + "\n")
    time.sleep(0.5)
    try:
        yield log
    finally:
        only_from.unlink(missing_ok=True)
        proc.terminate()
        proc.wait(timeout=10)


def deploy(*extra: str) -> tuple[int, str, float]:
    started = time.monotonic()
    env = {**ansible_env(), "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default"}
    proc = subprocess.run([str(VENV_BIN / "ansible-playbook"), "playbooks/deploy_dflash.yml", "-l", "ct200",
                           *extra], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - started


def test_a_host_behind_a_proxy_deploys_through_it_and_only_through_it(proxy):
    full_path = json.dumps({"deploy_state_enabled": False})
    rc, out, seconds = deploy("-e", full_path)
    print(f"without the proxy: rc {rc} in {seconds:.1f} s")
    assert rc == 2, out[-4000:]
    assert "403" in out and INDEX in out, out[-4000:]
    assert "nothing was switched or restarted" in out or "not changed" in out, out[-4000:]
    assert not proxy.exists() or not proxy.read_text().strip()

    with_proxy = json.dumps({"deploy_state_enabled": False,
                             "dflash_proxy_env": {"http_proxy": f"http://{GATEWAY}:{PROXY_PORT}"}})
    rc, out, seconds = deploy("-e", with_proxy)
    print(f"through the proxy: rc {rc} in {seconds:.1f} s")
    assert rc == 0, out[-4000:]
    lines = [line.split() for line in proxy.read_text().splitlines()]
    served = [url for client, _method, url, status in lines if client == CT200 and status == "200"]
    assert any(f"http://{INDEX}/simple/" in url for url in served), lines[:20]
    assert not [line for line in lines if line[-1] == "403"], lines
    record = lab.hexec(next(h for h in lab.hosts() if h.name == "ct200"),
                       "cat /var/lib/dflash-deploy/converged.json 2>/dev/null || true").stdout
    assert str(PROXY_PORT) not in record
