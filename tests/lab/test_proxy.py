"""An operator behind a proxy can deploy: the lab's index answers only its proxy, and dflash_proxy_env takes
uv there, with the proxy's credentials shown nowhere (issue 44 item 4, security round 3 m4).

The lab's package index (tools/lab/index_server.py, on the gateway) is told to answer its own gateway address
alone (the only-from file); a forward proxy on the gateway that asks for a user and password
(tools/lab/proxy_server.py) is the one client at that address, so ct200 reaches the index only through the
proxy, as a host behind a company proxy does.

1. Without the proxy, the full path (`deploy_state_enabled=false`; the fast path would also ask the index, and
   fall to the full path) fails at the lock, rc 2, naming the index and its refusal (403).
2. With `dflash_proxy_env: {http_proxy: http://ops:<password>@<gateway>:8632}`, the same deploy passes at -vvv;
   the proxy's log shows ct200's requests for the index's pages answered 200, and none refused; the password
   is in none of the output, and not in the host's record of the deploy.
3. A host's own `/etc/uv/uv.toml` (which uv would ignore: the roles run it with UV_NO_CONFIG), put there after
   a deploy, keeps the re-run off the fast path, and stops it at preflight, before any change, in one line naming
   the file.
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
PASSWORD = "Prx-7c1e-lab-secret"
CT200 = "10.89.64.200"


def ct200():
    return next(h for h in lab.hosts() if h.name == "ct200")


@pytest.fixture
def proxy(tmp_path):
    log = tmp_path / "proxy.log"
    proc = subprocess.Popen([sys.executable, str(REPO / "tools" / "lab" / "proxy_server.py"), "--bind", GATEWAY,
                             "--port", str(PROXY_PORT), "--allow", INDEX, "--log", str(log),
                             "--auth", f"ops:{PASSWORD}"],
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
    # uv keeps the index's pages it fetched (HTTP caching): a host deployed before would lock from its cache
    # without asking the index. Its cached pages go; its wheels stay.
    lab.hexec(ct200(), "rm -rf /opt/dflash/cache/uv/simple-v*")
    rc, out, seconds = deploy("-e", json.dumps({"deploy_state_enabled": False}))
    print(f"without the proxy: rc {rc} in {seconds:.1f} s")
    assert rc == 2, out[-4000:]
    assert "403" in out and INDEX in out, out[-4000:]
    assert not proxy.exists() or not proxy.read_text().strip()

    proxy_env = {"http_proxy": f"http://ops:{PASSWORD}@{GATEWAY}:{PROXY_PORT}"}
    rc, out, seconds = deploy("-e", json.dumps({"deploy_state_enabled": False, "dflash_proxy_env": proxy_env}),
                              "-vvv")
    print(f"through the proxy, at -vvv: rc {rc} in {seconds:.1f} s")
    assert rc == 0, out[-4000:]
    lines = [line.split() for line in proxy.read_text().splitlines()]
    served = [url for client, _method, url, status in lines if client == CT200 and status == "200"]
    assert any(url.startswith(f"http://{INDEX}/simple/") for url in served), lines[:20]
    assert not [line for line in lines if line[-1] in ("403", "407")], lines
    assert PASSWORD not in out
    record = lab.hexec(ct200(), "cat /var/lib/dflash-deploy/converged.json 2>/dev/null; "
                                "journalctl -o cat --since -10min 2>/dev/null | grep -c Prx-7c1e || true").stdout
    assert PASSWORD not in record and record.strip().endswith("0"), record[-500:]


def test_a_host_s_own_uv_configuration_is_refused_before_any_change():
    host = ct200()
    lab.hexec(host, "mkdir -p /etc/uv && printf 'index-url = \"http://192.0.2.9/simple\"\\n' > /etc/uv/uv.toml")
    try:
        before = lab.hexec(host, "ls -l --time-style=+%s /etc/dflash /opt/dflash 2>&1").stdout
        rc, out, seconds = deploy()
        print(f"with /etc/uv/uv.toml: rc {rc} in {seconds:.1f} s")
        assert rc == 2, out[-4000:]
        assert "/etc/uv/uv.toml" in out and "dflash_proxy_env" in out, out[-4000:]
        assert lab.hexec(host, "ls -l --time-style=+%s /etc/dflash /opt/dflash 2>&1").stdout == before
    finally:
        lab.hexec(host, "rm -rf /etc/uv", check=False)
